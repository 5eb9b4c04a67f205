// kiri launch -n N [--hostfile F] [--threads T] -- train CONFIG ...
// Starts N ranks of this kiri binary through mpirun. Works as root in a
// container and on a laptop; multi-node through the hostfile (or run
// `mpirun`/`srun kiri train ...` directly: kiri finds the MPI world itself).
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
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
}  // namespace

std::vector<std::string> launch_argv(const std::vector<std::string>& argv) {
  // Everything after "--" is the kiri command each rank runs.
  std::vector<std::string> own, command;
  bool after = false;
  for (const std::string& a : argv) {
    if (!after && a == "--")
      after = true;
    else if (!after && a == "-np")
      own.push_back("--np");  // mpirun's spelling (CLI11 would read -n with the value "p")
    else
      (after ? command : own).push_back(a);
  }
  Args a(own, verb_spec("launch"));
  KIRI_CHECK_KIND(kConfig, !command.empty(),
                  "kiri launch needs the command after --, e.g. kiri launch -n 2 -- train");
  KIRI_CHECK_KIND(kConfig, !(a.get("n") && a.get("np")), "give -n or --np, not both");
  const int64_t n = a.get_int("n", a.get_int("np", 0));
  KIRI_CHECK_KIND(kConfig, n >= 1, "kiri launch needs -n N (the number of ranks), N >= 1, got ", n);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t threads = a.get_int("threads", std::max<int64_t>(1, cores / n));
  std::vector<std::string> out = {a.get("mpirun").value_or("mpirun"), "-n", std::to_string(n)};
  if (auto h = a.get("hostfile")) out.insert(out.end(), {"--hostfile", *h});
  if (geteuid() == 0) out.push_back("--allow-run-as-root");
  // More ranks than cores is fine on a laptop (and in tests); binding would
  // pile them onto the same core.
  out.insert(out.end(), {"--oversubscribe", "--bind-to", "none", "-x",
                         "OMP_NUM_THREADS=" + std::to_string(threads), self_path()});
  if (verbose()) out.push_back("--verbose");  // kiri --verbose launch: the ranks' errors too
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

int cmd_launch(const std::vector<std::string>& argv) {
  std::vector<std::string> cmd = launch_argv(argv);
  std::string line;
  for (const std::string& s : cmd) line += (line.empty() ? "" : " ") + s;
  std::fprintf(stderr, "[kiri] launch: %s\n", line.c_str());
  std::vector<char*> c;
  for (std::string& s : cmd) c.push_back(s.data());
  c.push_back(nullptr);
  execvp(c[0], c.data());
  KIRI_RAISE(kIo, "cannot start ", cmd[0], " (is OpenMPI installed? apt-get install openmpi-bin)");
}

}  // namespace kiri::cli
