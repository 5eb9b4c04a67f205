#include "kiri/launch/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "kiri/base/error.h"

namespace kiri::launch {

namespace {
std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  KIRI_CHECK_KIND(kIo, n > 0, "cannot find the kiri binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}
}  // namespace

std::vector<std::string> command_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
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
    for (std::string w : command_words(*p.launcher)) {
      for (size_t at = w.find("{n}"); at != std::string::npos; at = w.find("{n}"))
        w.replace(at, 3, std::to_string(ranks));
      out.push_back(w);
    }
  } else {
    out = {p.mpirun, "-n", std::to_string(ranks)};
    if (hostfile)
      out.insert(out.end(), {"--hostfile", *hostfile});
    else if (p.hosts)
      out.insert(out.end(), {"--host", *p.hosts});  // Open MPI's own form: a:2,b:2
    if (geteuid() == 0) out.push_back("--allow-run-as-root");
    // Open MPI's one TCP socket per peer pair is kept: kiri's collectives on a pair of
    // ranks on two hosts fill a link both ways with it (docs/cluster.md, docs/comm.md);
    // OMPI_MCA_btl_tcp_links=4 opts in to more.
    // More ranks than cores is fine on a laptop (and in tests); binding would
    // pile them onto the same core.
    out.insert(out.end(), {"--oversubscribe", "--bind-to", "none", "-x",
                           "OMP_NUM_THREADS=" + std::to_string(threads)});
    // The supervisor maps ranks to hosts slot by slot (hostfile order), as mpirun must.
    if (!status_dir.empty())
      out.insert(out.end(), {"--map-by", "slot", "-x", "KIRI_LAUNCH_STATUS=" + status_dir});
  }
  out.push_back(self_path());
  if (p.verbose) out.push_back("--verbose");  // kiri --verbose launch: the ranks' errors too
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

}  // namespace kiri::launch
