#pragma once
// What kiri launch starts: the plan its options give (the command line's parsing and checks
// are kiri launch's, cli/launch_command.cpp), and the launcher's command line that starts
// the ranks of this binary, mpirun's or another launcher's (--launcher).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiri::launch {

// kiri launch's options, parsed and checked.
struct LaunchPlan {
  int64_t n = 0;                        // -n: the ranks of the first attempt
  std::optional<std::string> hostfile;  // --hostfile
  std::optional<std::string> hosts;     // --hosts a:2,b:2 (checked: launch/supervisor.h)
  std::optional<int64_t> threads;       // --threads; else cores / ranks
  std::string mpirun = "mpirun";        // --mpirun
  std::optional<std::string> launcher;  // --launcher "srun -n {n}": instead of mpirun
  int64_t max_restarts = 0;             // --max-restarts
  bool exclude_failed = false;          // --exclude-failed
  int64_t max_host_failures = 1;        // --max-host-failures
  int64_t min_ranks = 0;                // --min-ranks (0: -n, no shrinking)
  bool verbose = false;                 // kiri --verbose launch: the ranks' errors in full too
  std::vector<std::string> command;     // after --: the kiri verb and its arguments
  bool supervised() const { return max_restarts > 0; }
};

// OpenMP threads per rank: --threads, else this machine's cores / ranks (at least 1).
int64_t launch_threads(const LaunchPlan& plan, int64_t ranks);

// The command that starts `ranks` ranks of this binary running `command`: mpirun's (with
// `hostfile` if given, and `status_dir` passed on as KIRI_LAUNCH_STATUS if not empty) or
// the --launcher's with {n} replaced.
std::vector<std::string> launcher_command(const LaunchPlan& plan, int64_t ranks,
                                          const std::optional<std::string>& hostfile,
                                          const std::string& status_dir,
                                          const std::vector<std::string>& command);

// The words of a command line split at white space (a --launcher's).
std::vector<std::string> command_words(const std::string& text);

}  // namespace kiri::launch
