// kiri launch -n N [--hostfile F] [--threads T] [--max-restarts R ...] -- train CONFIG ...
// Starts N ranks of this kiri binary through mpirun (or --launcher). Works as root in a
// container and on a laptop; multi-node through the hostfile (or run `mpirun`/`srun kiri
// train ...` directly: kiri finds the MPI world itself). With --max-restarts the job runs
// under the supervisor (launch/supervisor.h); without, kiri becomes mpirun (exec).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/report.h"
#include "kiri/cli/verbs.h"
#include "kiri/launch/supervisor.h"

namespace kiri::cli {

using launch::LaunchPlan;

LaunchPlan parse_launch(const std::vector<std::string>& argv) {
  // Everything after "--" is the kiri command each rank runs.
  std::vector<std::string> own;
  LaunchPlan p;
  bool after = false;
  for (const std::string& a : argv) {
    if (!after && a == "--")
      after = true;
    else if (!after && a == "-np")
      own.push_back("--np");  // mpirun's spelling (CLI11 would read -n with the value "p")
    else
      (after ? p.command : own).push_back(a);
  }
  Args a(own, verb_spec("launch"));
  p.verbose = verbose();
  KIRI_CHECK_KIND(kConfig, !p.command.empty(),
                  "kiri launch needs the command after --, e.g. kiri launch -n 2 -- train");
  KIRI_CHECK_KIND(kConfig, !(a.get("n") && a.get("np")), "give -n or --np, not both");
  p.n = a.get_int("n", a.get_int("np", 0));
  KIRI_CHECK_KIND(kConfig, p.n >= 1, "kiri launch needs -n N (the number of ranks), N >= 1, got ",
                  p.n);
  if (a.get("threads")) p.threads = a.get_int("threads", 1);
  p.hostfile = a.get("hostfile");
  p.hosts = a.get("hosts");
  KIRI_CHECK_KIND(kConfig, !(p.hostfile && p.hosts), "give --hostfile or --hosts, not both");
  if (p.hosts) {
    int64_t slots = 0;
    for (const launch::Host& h : launch::parse_hosts(*p.hosts)) slots += h.slots;
    KIRI_CHECK_KIND(kConfig, slots >= p.n, "--hosts ", *p.hosts, " has ", slots, " ranks for -n ",
                    p.n, ": name more hosts or more ranks per host");
  }
  p.mpirun = a.get("mpirun").value_or("mpirun");
  p.launcher = a.get("launcher");
  KIRI_CHECK_KIND(kConfig, !(p.launcher && (p.hostfile || p.hosts || a.get("mpirun"))),
                  "--launcher replaces mpirun: give it, or --mpirun / --hostfile / --hosts, not "
                  "both");
  KIRI_CHECK_KIND(kConfig, !p.launcher || !launch::command_words(*p.launcher).empty(),
                  "--launcher needs a command, e.g. --launcher \"srun -n {n}\"");
  p.max_restarts = a.get_int("max-restarts", 0);
  KIRI_CHECK_KIND(kConfig, p.max_restarts >= 0 && p.max_restarts <= 1000,
                  "--max-restarts must be in [0, 1000], got ", p.max_restarts);
  p.exclude_failed = a.flag("exclude-failed");
  p.max_host_failures = a.get_int("max-host-failures", 1);
  KIRI_CHECK_KIND(kConfig, p.max_host_failures >= 1, "--max-host-failures must be at least 1, got ",
                  p.max_host_failures);
  p.min_ranks = a.get_int("min-ranks", p.n);
  KIRI_CHECK_KIND(kConfig, p.min_ranks >= 1 && p.min_ranks <= p.n, "--min-ranks must be in [1, ",
                  p.n, "] (-n), got ", p.min_ranks);
  const bool elastic = p.exclude_failed || a.get("min-ranks") || a.get("max-host-failures");
  KIRI_CHECK_KIND(kConfig, !elastic || p.supervised(),
                  "--exclude-failed, --max-host-failures and --min-ranks decide how a job is "
                  "restarted: give --max-restarts N too");
  // Without spare slots (a hostfile or --hosts may have some), a restart without the failed
  // host has fewer ranks than -n.
  KIRI_CHECK_KIND(kConfig, !p.exclude_failed || p.min_ranks < p.n || p.hostfile || p.hosts,
                  "--exclude-failed restarts without the failed host: give --min-ranks M below "
                  "-n ",
                  p.n, ", or spare slots with --hostfile or --hosts");
  KIRI_CHECK_KIND(kConfig, !p.supervised() || p.command[0] == "train",
                  "kiri launch --max-restarts restarts `train` runs from their checkpoints, not `",
                  p.command[0], "`");
  return p;
}

std::vector<std::string> launch_argv(const std::vector<std::string>& argv) {
  const LaunchPlan p = parse_launch(argv);
  return launch::launcher_command(p, p.n, p.hostfile, "", p.command);
}

int cmd_launch(const std::vector<std::string>& argv) {
  const LaunchPlan plan = parse_launch(argv);
  // A train job's config is checked here first: an error is kiri's one line and exit 2, not
  // every rank's line and mpirun's abort banner. The job is then watched even without
  // restarts: across hosts, mpirun cannot end a job one of whose hosts it cannot reach, and
  // the supervisor ends such a launcher; on a terminal, a Ctrl-C reaches the supervisor, which
  // asks the ranks to save and stop rather than mpirun, which would kill them (docs/cli.md).
  if (plan.command[0] == "train") {
    const kiri::RunConfig run = train_command_paths(
        std::vector<std::string>(plan.command.begin() + 1, plan.command.end()), plan.n);
    if (!plan.launcher) return launch::supervise(plan, run);
  }
  std::vector<std::string> cmd =
      launch::launcher_command(plan, plan.n, plan.hostfile, "", plan.command);
  std::string line;
  for (const std::string& s : cmd) line += (line.empty() ? "" : " ") + s;
  std::fprintf(stderr, "[kiri] launch: %s\n", line.c_str());
  if (plan.launcher)  // mpirun gets it through -x; another launcher from the environment
    ::setenv("OMP_NUM_THREADS", std::to_string(launch::launch_threads(plan, plan.n)).c_str(), 1);
  std::vector<char*> c;
  for (std::string& s : cmd) c.push_back(s.data());
  c.push_back(nullptr);
  execvp(c[0], c.data());
  KIRI_RAISE(kIo, "cannot start ", cmd[0], " (is OpenMPI installed? apt-get install openmpi-bin)");
}

}  // namespace kiri::cli
