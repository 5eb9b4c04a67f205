#pragma once
// kiri launch's supervisor (--max-restarts; docs/cli.md, "Failures and restarts"): runs the
// job, and when it ends with a rank failure, waits for every process to be gone and starts
// it again from the run folder's latest complete checkpoint, on the hosts that remain.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiri/config/run_config.h"
#include "kiri/launch/launcher.h"

namespace kiri::launch {

// One host of a hostfile (Open MPI's form: "name slots=N", '#' comments; slots default 1).
struct Host {
  std::string name;
  int64_t slots = 1;
};
std::vector<Host> parse_hostfile(const std::string& path);
// kiri launch --hosts "a:2,b:2" (Open MPI's --host form; ":N" defaults to 1): the hosts in
// order, kConfig naming an empty host, a repeated one or a bad count.
std::vector<Host> parse_hosts(const std::string& text);

// The command of a restart: `command` (train ...) without --overwrite, --resume and
// --init-from, continuing from `checkpoint` (a step directory; "" when there is none yet);
// on a world of another size, with `--set parallel.dp=0` (unless --auto) and
// `--global-batch G` when G > 0.
std::vector<std::string> restart_command(const std::vector<std::string>& command,
                                         const std::string& checkpoint, bool resized,
                                         int64_t global_batch);

// Runs the plan under supervision; returns the exit code. `run` is the config of the plan's
// train command as the run would start, paths resolved: its run folder holds the attempts'
// records and its checkpoints are what a restart resumes from.
int supervise(const LaunchPlan& plan, const kiri::RunConfig& run);

}  // namespace kiri::launch
