#pragma once
// kiri plan CONFIG / --set KEY=VALUE: the training vocabulary as the planner's input.
#include <functional>

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

// Whether kiri plan was given a config (a positional CONFIG or a --set).
bool plan_has_config(const Args& a);

// The config (the file, else the planner's defaults; then the layout flags as the keys they
// alias, then --set in order) as the planner's model and layout. The model is the config's
// when it gives model.* keys (a contradiction with --model / --layers / --params is named),
// else `flags_model()`'s. parallel.dp 0 is resolved against --gpus, else the nodes' devices.
ConfigPlan plan_of_config(const Args& a, const plan::ClusterSpec& cluster,
                          const std::function<plan::ModelSpec()>& flags_model);

}  // namespace kiri::cli
