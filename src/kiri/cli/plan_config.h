#pragma once
// kiri plan CONFIG / --set KEY=VALUE: the training vocabulary as the planner's input.
#include <functional>
#include <optional>
#include <string>

#include "kiri/cli/args.h"
#include "kiri/plan/layout.h"
#include "kiri/plan/specs.h"

namespace kiri::cli {

// The model, the layout and the world that a training config describes.
struct ConfigPlan {
  plan::ModelSpec model;
  plan::Layout layout;
  int world = 0;
  // Whether the config gives the global batch (a file, train.grad_accum or
  // parallel.microbatches); else kiri plan's default applies (--global-batch's).
  bool batch_given = false;
};

// Whether kiri plan was given a config (a positional CONFIG, a --set, or a familiar flag of
// config_flags.h other than --bf16, --fp16 and --batch-size, which the flags mode reads too).
bool plan_has_config(const Args& a);
// The value that kiri plan's flags (its own, the familiar ones) and --set give `key`
// (nullopt: none); two of them for one key are a kConfig error naming both.
std::optional<std::string> plan_flag_value(const Args& a, const std::string& key);

// The config (the file, else the planner's defaults; then the layout flags as the keys they
// alias, then --set in order) as the planner's model and layout. The model is the config's
// when it gives model.* keys (a contradiction with --model / --layers / --params is named),
// else `flags_model()`'s. parallel.dp 0 is resolved against --gpus, else the nodes' devices.
ConfigPlan plan_of_config(const Args& a, const plan::ClusterSpec& cluster,
                          const std::function<plan::ModelSpec()>& flags_model);

}  // namespace kiri::cli
