// kiri launch -n N [--hostfile F] [--threads T] [--max-restarts R ...] -- train CONFIG ...
// Starts N ranks of this kiri binary through mpirun (or --launcher). Works as root in a
// container and on a laptop; multi-node through the hostfile (or run `mpirun`/`srun kiri
// train ...` directly: kiri finds the MPI world itself). With --max-restarts the job runs
// under the supervisor (launch_supervisor.h); without, kiri becomes mpirun (exec).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/launch_supervisor.h"
#include "kiri/cli/report.h"
#include "kiri/cli/verbs.h"

namespace kiri::cli {

namespace {
std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  KIRI_CHECK_KIND(kIo, n > 0, "cannot find the kiri binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}
}  // namespace

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
  KIRI_CHECK_KIND(kConfig, !p.command.empty(),
                  "kiri launch needs the command after --, e.g. kiri launch -n 2 -- train");
  KIRI_CHECK_KIND(kConfig, !(a.get("n") && a.get("np")), "give -n or --np, not both");
  p.n = a.get_int("n", a.get_int("np", 0));
  KIRI_CHECK_KIND(kConfig, p.n >= 1, "kiri launch needs -n N (the number of ranks), N >= 1, got ",
                  p.n);
  if (a.get("threads")) p.threads = a.get_int("threads", 1);
  p.hostfile = a.get("hostfile");
  p.mpirun = a.get("mpirun").value_or("mpirun");
  p.launcher = a.get("launcher");
  KIRI_CHECK_KIND(kConfig, !(p.launcher && (p.hostfile || a.get("mpirun"))),
                  "--launcher replaces mpirun: give it, or --mpirun / --hostfile, not both");
  KIRI_CHECK_KIND(kConfig, !p.launcher || !words(*p.launcher).empty(),
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
  KIRI_CHECK_KIND(kConfig, !p.exclude_failed || p.min_ranks < p.n,
                  "--exclude-failed restarts on fewer ranks: give --min-ranks M below -n ", p.n);
  KIRI_CHECK_KIND(kConfig, !p.supervised() || p.command[0] == "train",
                  "kiri launch --max-restarts restarts `train` runs from their checkpoints, not `",
                  p.command[0], "`");
  return p;
}

int64_t launch_threads(const LaunchPlan& p, int64_t ranks) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return p.threads.value_or(std::max<int64_t>(1, cores / ranks));
}

std::vector<std::string> launcher_command(const LaunchPlan& p, int64_t ranks,
                                          const std::optional<std::string>& hostfile,
                                          const std::string& status_dir,
                                          const std::vector<std::string>& command) {
  const int64_t threads = launch_threads(p, ranks);
  std::vector<std::string> out;
  if (p.launcher) {  // its own environment carries OMP_NUM_THREADS and the status folder
    for (std::string w : words(*p.launcher)) {
      for (size_t at = w.find("{n}"); at != std::string::npos; at = w.find("{n}"))
        w.replace(at, 3, std::to_string(ranks));
      out.push_back(w);
    }
  } else {
    out = {p.mpirun, "-n", std::to_string(ranks)};
    if (hostfile) out.insert(out.end(), {"--hostfile", *hostfile});
    if (geteuid() == 0) out.push_back("--allow-run-as-root");
    // More ranks than cores is fine on a laptop (and in tests); binding would
    // pile them onto the same core.
    out.insert(out.end(), {"--oversubscribe", "--bind-to", "none", "-x",
                           "OMP_NUM_THREADS=" + std::to_string(threads)});
    // The supervisor maps ranks to hosts slot by slot (hostfile order), as mpirun must.
    if (!status_dir.empty())
      out.insert(out.end(), {"--map-by", "slot", "-x", "KIRI_LAUNCH_STATUS=" + status_dir});
  }
  out.push_back(self_path());
  if (verbose()) out.push_back("--verbose");  // kiri --verbose launch: the ranks' errors too
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

std::vector<std::string> launch_argv(const std::vector<std::string>& argv) {
  const LaunchPlan p = parse_launch(argv);
  return launcher_command(p, p.n, p.hostfile, "", p.command);
}

int cmd_launch(const std::vector<std::string>& argv) {
  const LaunchPlan plan = parse_launch(argv);
  if (plan.supervised()) return supervise(plan);
  std::vector<std::string> cmd = launcher_command(plan, plan.n, plan.hostfile, "", plan.command);
  std::string line;
  for (const std::string& s : cmd) line += (line.empty() ? "" : " ") + s;
  std::fprintf(stderr, "[kiri] launch: %s\n", line.c_str());
  if (plan.launcher)  // mpirun gets it through -x; another launcher from the environment
    ::setenv("OMP_NUM_THREADS", std::to_string(launch_threads(plan, plan.n)).c_str(), 1);
  std::vector<char*> c;
  for (std::string& s : cmd) c.push_back(s.data());
  c.push_back(nullptr);
  execvp(c[0], c.data());
  KIRI_RAISE(kIo, "cannot start ", cmd[0], " (is OpenMPI installed? apt-get install openmpi-bin)");
}

}  // namespace kiri::cli
