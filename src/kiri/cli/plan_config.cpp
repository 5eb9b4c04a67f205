// kiri plan CONFIG / --set (plan_config.h): the keys kiri train reads, through the same
// schema, then the planner's model and layout of them (train_planning.h's plan_model and
// plan_layout, which --auto and --dry-run use).
#include "kiri/cli/plan_config.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/cli/config_flags.h"
#include "kiri/cli/train_planning.h"
#include "kiri/config/config_schema.h"
#include "kiri/data/tokenizer.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

namespace {

// kiri plan's short layout flags and the config keys they alias.
const std::vector<std::pair<const char*, const char*>>& flag_keys() {
  static const std::vector<std::pair<const char*, const char*>> keys = {
      {"dp", "parallel.dp"},
      {"tp", "parallel.tp"},
      {"pp", "parallel.pp"},
      {"zero-stage", "parallel.zero_stage"},
      {"shard-group-size", "parallel.shard_group_size"},
      {"activation-checkpointing", "parallel.activation_checkpointing"},
      {"recompute-modules", "parallel.recompute_modules"},
      {"sequence-parallel", "parallel.sequence_parallel"},
      {"schedule", "parallel.schedule"},
      {"virtual-stages", "parallel.virtual_stages"},
      {"wrap-blocks", "parallel.wrap_blocks"},
      {"dtype", "train.dtype"},
      {"micro-batch", "train.micro_batch"},
      {"seq-len", "train.seq_len"},
      {"offload-optimizer", "offload.optimizer"},
      {"offload-parameters", "offload.parameters"},
      {"offload-gradients", "offload.gradients"},
      {"offload-buffer-count", "offload.buffer_count"},
      {"offload-buffer-mb", "offload.buffer_mb"},
      {"offload-block-size", "offload.block_size"},
      {"offload-queue-depth", "offload.queue_depth"}};
  return keys;
}

// The flags given (kiri plan's, then the familiar ones of config_flags.h) and --set, as
// KEY=VALUE; a key that two of them give is refused by name.
std::vector<std::string> alias_sets(const Args& a) {
  std::vector<FlagSet> flags;
  for (const auto& [flag, key] : flag_keys()) {
    const bool boolean = std::string(flag) == "sequence-parallel";
    if (boolean ? !a.flag(flag) : !a.get(flag)) continue;
    flags.push_back({std::string("--") + flag,
                     std::string(key) + "=" + (boolean ? std::string("true") : *a.get(flag))});
  }
  for (FlagSet& f : config_flag_sets(a)) flags.push_back(std::move(f));
  return merge_flag_sets(flags, a.all("set"));
}

// The planner's defaults where no config file gives them: kiri plan's own (bf16, b 1, s the
// model's context, one rank of each degree), not kiri train's.
kiri::RunConfig planner_defaults(const plan::ModelSpec& model) {
  kiri::RunConfig c = kiri::default_run_config();
  c.parallel.dp = 1;
  c.train.dtype = kiri::Precision::kBf16;
  c.train.micro_batch = 1;
  c.train.grad_accum = 1;
  c.train.seq_len = model.params_only() ? 1024 : model.max_seq;
  return c;
}

bool gives_model(const std::string& file, const std::vector<std::string>& sets) {
  if (!file.empty()) return true;
  return std::any_of(sets.begin(), sets.end(),
                     [](const std::string& s) { return s.rfind("model.", 0) == 0; });
}

}  // namespace

bool plan_has_config(const Args& a) {
  // --bf16, --fp16 and --batch-size are the flags mode's --dtype and --micro-batch too.
  for (const FlagSet& f : config_flag_sets(a))
    if (f.flag != "--bf16" && f.flag != "--fp16" && f.flag != "--batch-size") return true;
  return !a.positional().empty() || !a.all("set").empty();
}

std::optional<std::string> plan_flag_value(const Args& a, const std::string& key) {
  std::optional<std::string> out;
  for (const std::string& s : alias_sets(a))
    if (s.rfind(key + "=", 0) == 0) out = s.substr(key.size() + 1);
  return out;
}

ConfigPlan plan_of_config(const Args& a, const plan::ClusterSpec& cluster,
                          const std::function<plan::ModelSpec()>& flags_model) {
  const std::string file = a.positional().empty() ? "" : a.positional().front();
  const std::vector<std::string> sets = alias_sets(a);
  const bool config_model = gives_model(file, a.all("set"));
  KIRI_CHECK_KIND(kConfig, !config_model || !(a.get("model") || a.get("layers") || a.get("params")),
                  "give one model: the config's model.* keys (", file.empty() ? "--set" : file,
                  ") or --model / --layers / --params");
  ConfigPlan out;
  kiri::RunConfig cfg;
  if (config_model) {
    cfg = file.empty() ? kiri::default_run_config() : load_config(file, {});
  } else {
    out.model = flags_model();
    cfg = planner_defaults(out.model);
  }
  for (const std::string& s : sets) apply_set(cfg, s);
  // interleaved's default: 2 model chunks per rank, as --schedule interleaved alone.
  const auto given = config_entries(file, sets);
  const bool stages_given = std::any_of(given.begin(), given.end(), [](const auto& e) {
    return e.first == "parallel.virtual_stages";
  });
  if (cfg.parallel.schedule == kiri::PipelineSchedule::kInterleaved && !stages_given)
    cfg.parallel.virtual_stages = 2;
  if (config_model) {
    if (cfg.model.vocab_size == 0) {
      const auto tokenizer =
          data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
      kiri::resolve(cfg,
                    {.tokenizer_vocab = tokenizer->vocab_size(), .tokenizer = tokenizer->name()});
    }
    out.model = plan_model(cfg);
  }
  const int64_t devices =
      int64_t{cluster.devices_per_node} * a.get_int(a.get("hosts") ? "hosts" : "nodes", 1);
  out.world = cfg.parallel.dp == 0 ? static_cast<int>(a.get_int("gpus", devices))
                                   : cfg.parallel.dp * cfg.parallel.tp * cfg.parallel.pp;
  KIRI_CHECK_KIND(kConfig, !a.get("gpus") || a.get_int("gpus", 0) == out.world, "--gpus ",
                  a.get_int("gpus", 0), " is not parallel.dp x tp x pp = ", out.world);
  kiri::resolve(cfg, {.world = out.world});
  out.layout = plan_layout(cfg);
  out.batch_given = !file.empty() || std::any_of(given.begin(), given.end(), [](const auto& e) {
    return e.first == "train.grad_accum" || e.first == "parallel.microbatches";
  });
  return out;
}

}  // namespace kiri::cli
