#pragma once
// The kiri commands. Each returns the process exit code; errors are thrown
// as kiri::Error and turned into a message and exit code by run_cli().
#include <string>
#include <vector>

#include "kiri/config/run_config.h"
#include "kiri/launch/launcher.h"

namespace kiri::cli {

int run_cli(const std::vector<std::string>& argv);

int cmd_train(const std::vector<std::string>& args);
int cmd_config(const std::vector<std::string>& args);
int cmd_sample(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_data(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_launch(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
// The config of a `kiri train` command line (its arguments after `train`) as the run would
// start, paths resolved: kiri launch's supervisor reads the run folder's from it. Checked as
// the ranks would check it, the layout on `world` ranks too (unless --auto): kiri launch
// names a config error in one line before any rank starts.
kiri::RunConfig train_command_paths(const std::vector<std::string>& args, int world);
// kiri launch's arguments, parsed and checked.
launch::LaunchPlan parse_launch(const std::vector<std::string>& args);
// The mpirun command line of `kiri launch` (exposed for tests).
std::vector<std::string> launch_argv(const std::vector<std::string>& args);

}  // namespace kiri::cli
