#pragma once
// The familiar flags of training scripts (--lr, --max-steps, --batch-size, --bf16, ...) as
// aliases of kiri's config keys: one table, whose rows every verb that takes config keys
// (train, config, plan; launch passes them to train) adds to its options, and whose values
// become `--set KEY=VALUE` (docs/cli.md). The keys, their types and checks are the schema's.
#include <string>
#include <vector>

#include "kiri/cli/args.h"

namespace kiri::cli {

struct ConfigFlag {
  const char* flag;   // without "--": "lr"
  const char* key;    // the config key it sets: "train.lr"
  const char* value;  // a flag without a value sets the key to this ("bf16"); nullptr: takes one
  const char* value_name;
};

const std::vector<ConfigFlag>& config_flags();
// The table's rows as options ("--lr LR: train.lr"), for the verbs' tables.
std::vector<OptionSpec> config_flag_options();

// A flag given and the --set it stands for: {"--lr", "train.lr=3e-4"}.
struct FlagSet {
  std::string flag;
  std::string set;
};
// The familiar flags `a` holds, in the table's order.
std::vector<FlagSet> config_flag_sets(const Args& a);
// `flags` then `sets` (--set's KEY=VALUE) as one list of KEY=VALUE; a key that two of them
// give is a kConfig error naming both ("--lr and --set train.lr=1e-3 both give train.lr").
std::vector<std::string> merge_flag_sets(const std::vector<FlagSet>& flags,
                                         const std::vector<std::string>& sets);

}  // namespace kiri::cli
