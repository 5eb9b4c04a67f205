#pragma once
// kiri launch's supervisor (--max-restarts; docs/cli.md, "Failures and restarts"): runs the
// job, and when it ends with a rank failure, waits for every process to be gone and starts
// it again from the run folder's latest complete checkpoint, on the hosts that remain.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiri::cli {

// kiri launch's options, parsed and checked.
struct LaunchPlan {
  int64_t n = 0;                        // -n: the ranks of the first attempt
  std::optional<std::string> hostfile;  // --hostfile
  std::optional<int64_t> threads;       // --threads; else cores / ranks
  std::string mpirun = "mpirun";        // --mpirun
  std::optional<std::string> launcher;  // --launcher "srun -n {n}": instead of mpirun
  int64_t max_restarts = 0;             // --max-restarts
  bool exclude_failed = false;          // --exclude-failed
  int64_t max_host_failures = 1;        // --max-host-failures
  int64_t min_ranks = 0;                // --min-ranks (0: -n, no shrinking)
  std::vector<std::string> command;     // after --: the kiri verb and its arguments
  bool supervised() const { return max_restarts > 0; }
};

LaunchPlan parse_launch(const std::vector<std::string>& argv);

// One host of a hostfile (Open MPI's form: "name slots=N", '#' comments; slots default 1).
struct Host {
  std::string name;
  int64_t slots = 1;
};
std::vector<Host> parse_hostfile(const std::string& path);

// OpenMP threads per rank: --threads, else this machine's cores / ranks (at least 1).
int64_t launch_threads(const LaunchPlan& plan, int64_t ranks);

// The command that starts `ranks` ranks of this binary running `command`: mpirun's (with
// `hostfile` if given, and `status_dir` passed on as KIRI_LAUNCH_STATUS if not empty) or
// the --launcher's with {n} replaced.
std::vector<std::string> launcher_command(const LaunchPlan& plan, int64_t ranks,
                                          const std::optional<std::string>& hostfile,
                                          const std::string& status_dir,
                                          const std::vector<std::string>& command);

// The command of a restart: `command` (train ...) without --overwrite, --resume and
// --init-from, continuing from `checkpoint` (a step directory; "" when there is none yet);
// on a world of another size, with `--set parallel.dp=0` (unless --auto) and
// `--global-batch G` when G > 0.
std::vector<std::string> restart_command(const std::vector<std::string>& command,
                                         const std::string& checkpoint, bool resized,
                                         int64_t global_batch);

// Runs the plan under supervision; returns the exit code.
int supervise(const LaunchPlan& plan);

}  // namespace kiri::cli
