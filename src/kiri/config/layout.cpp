#include "kiri/config/layout.h"

#include <utility>
#include <vector>

#include "kiri/base/error.h"

namespace kiri {

const char* name(ActivationCheckpointing a) {
  switch (a) {
    case ActivationCheckpointing::kNone:
      return "none";
    case ActivationCheckpointing::kFull:
      return "full";
    case ActivationCheckpointing::kEveryK:
      return "every_k";
    case ActivationCheckpointing::kSelective:
      return "selective";
  }
  return "?";
}

const char* name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::kGpipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

const char* name(Precision p) {
  switch (p) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

const char* name(OffloadTier t) {
  switch (t) {
    case OffloadTier::kNone:
      return "none";
    case OffloadTier::kCpu:
      return "cpu";
    case OffloadTier::kNvme:
      return "nvme";
    case OffloadTier::kAuto:
      return "auto";
  }
  return "?";
}

const char* name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFromZeroStage:
      return "";
    case ShardingStrategy::kNoShard:
      return "NO_SHARD";
    case ShardingStrategy::kShardGradOp:
      return "SHARD_GRAD_OP";
    case ShardingStrategy::kFullShard:
      return "FULL_SHARD";
    case ShardingStrategy::kHybridShard:
      return "HYBRID_SHARD";
  }
  return "?";
}

const std::vector<std::string>& recompute_module_names() {
  static const std::vector<std::string> names{"core_attn", "layernorm", "mlp_act"};
  return names;
}

std::string name(const RecomputeModules& m) {
  std::string s;
  for (const auto& [on, n] : {std::pair{m.core_attn, "core_attn"},
                              std::pair{m.layernorm, "layernorm"}, std::pair{m.mlp_act, "mlp_act"}})
    if (on) s += (s.empty() ? "" : ",") + std::string(n);
  return s;
}

RecomputeModules parse_recompute_modules(const std::vector<std::string>& names, LayoutWords words) {
  RecomputeModules r;
  for (const std::string& n : names) {
    if (n == "core_attn") {
      r.core_attn = true;
    } else if (n == "layernorm") {
      r.layernorm = true;
    } else if (n == "mlp_act") {
      r.mlp_act = true;
    } else {
      std::string valid;
      for (const std::string& v : recompute_module_names())
        valid += (valid.empty() ? "" : ", ") + v;
      KIRI_RAISE(kConfig, layout_word(words, "parallel.recompute_modules"), ": unknown module '", n,
                 "' (valid: ", valid, ")");
    }
  }
  return r;
}

RecomputeModules recompute_modules_of(ActivationCheckpointing a,
                                      const std::vector<std::string>& names, LayoutWords words) {
  if (a != ActivationCheckpointing::kSelective) {
    KIRI_CHECK_KIND(kConfig, names.empty(), layout_word(words, "parallel.recompute_modules"), " (",
                    names.size(), " given) needs ",
                    layout_word(words, "parallel.activation_checkpointing"), " = selective");
    return {};
  }
  return parse_recompute_modules(names.empty() ? std::vector<std::string>{"core_attn"} : names,
                                 words);
}

int Layout::stage() const {
  switch (sharding_strategy) {
    case ShardingStrategy::kFromZeroStage:
      return zero_stage;
    case ShardingStrategy::kNoShard:
      return 0;
    case ShardingStrategy::kShardGradOp:
      return 2;
    case ShardingStrategy::kFullShard:
    case ShardingStrategy::kHybridShard:
      return 3;
  }
  return zero_stage;
}

RecomputeModules Layout::recompute(LayoutWords words) const {
  if (activation_checkpointing != ActivationCheckpointing::kSelective) return {};
  return recompute_modules_of(activation_checkpointing, recompute_modules, words);
}

RecomputeModules Layout::recompute() const {
  return recompute(LayoutWords::kConfig);
}

int Layout::checkpoint_every() const {
  switch (activation_checkpointing) {
    case ActivationCheckpointing::kFull:
      return 1;
    case ActivationCheckpointing::kEveryK:
      return activation_checkpointing_k;
    default:
      return 0;
  }
}

std::string layout_word(LayoutWords words, const std::string& key) {
  if (words == LayoutWords::kConfig) return key;
  if (key == "parallel.microbatches") return "the micro-batches m (--global-batch / (b x dp))";
  if (key == "model.n_layer") return "--layers";
  if (key == "model.n_head") return "--heads";
  if (key == "model.num_key_value_heads") return "--kv-heads";
  const size_t dot = key.find('.');
  std::string option = key.substr(0, dot) == "offload" ? key : key.substr(dot + 1);
  for (char& c : option)
    if (c == '_' || c == '.') c = '-';
  return "--" + option;
}

void validate_world(int dp, int tp, int pp, int world, LayoutWords words) {
  const int64_t model = int64_t{tp} * pp, product = dp * model;
  if (product == world) return;
  KIRI_RAISE(kConfig,
             words == LayoutWords::kConfig ? "parallel.dp x tp x pp = " : "--dp x --tp x --pp = ",
             dp, " x ", tp, " x ", pp, " = ", product, " but the world has ", world, " process(es)",
             words == LayoutWords::kConfig && model >= 1 && world % model == 0
                 ? str(" (leave parallel.dp unset to infer dp = world ", world, " / (tp ", tp,
                       " x pp ", pp, ") = ", world / model, ")")
             : world == 1 ? std::string(" (start the ranks with kiri launch -n N)")
                          : std::string());
}

namespace {

// The rules of the ZeRO stage, the sharding strategy and the shard group.
void validate_sharding(const Layout& l, const LayoutFacts& f) {
  auto w = [&](const char* key) { return layout_word(f.words, key); };
  KIRI_CHECK_KIND(kConfig, l.zero_stage >= 0 && l.zero_stage <= 3, w("parallel.zero_stage"),
                  " must be 0, 1, 2 or 3, got ", l.zero_stage);
  const int stage = l.stage();
  const char* strategy = name(l.sharding_strategy);
  const bool with_strategy = l.sharding_strategy != ShardingStrategy::kFromZeroStage;
  KIRI_CHECK_KIND(kConfig, !with_strategy || l.zero_stage == 0 || l.zero_stage == stage,
                  w("parallel.zero_stage"), " = ", l.zero_stage,
                  " contradicts parallel.sharding_strategy = ", strategy, " (ZeRO stage ", stage,
                  "); set one of them");
  const int g = l.shard_group_size;
  KIRI_CHECK_KIND(kConfig, g >= 0, w("parallel.shard_group_size"), " must be >= 0, got ", g);
  const bool dp_known = l.dp >= 1;  // dp 0 is checked again once the world resolves it
  if (l.sharding_strategy == ShardingStrategy::kHybridShard) {
    KIRI_CHECK_KIND(kConfig, !dp_known || (g > 1 && g < l.dp && l.dp % g == 0),
                    "HYBRID_SHARD needs parallel.shard_group_size dividing parallel.dp = ", l.dp,
                    " and between 2 and dp - 1 (shard within a group, replicate across "
                    "groups), got ",
                    g);
    return;
  }
  KIRI_CHECK_KIND(kConfig, !with_strategy || !dp_known || g == 0 || g == l.dp,
                  "parallel.shard_group_size = ", g, " is for HYBRID_SHARD; ", strategy,
                  " shards over the whole dp group");
  if (g == 0) return;
  KIRI_CHECK_KIND(kConfig, stage >= 1, w("parallel.shard_group_size"), " = ", g,
                  " needs a ZeRO stage >= 1 (", w("parallel.zero_stage"), " = ", stage,
                  " shards nothing)");
  KIRI_CHECK_KIND(kConfig, !dp_known || l.dp % g == 0, w("parallel.shard_group_size"), " = ", g,
                  " must divide ", w("parallel.dp"), " = ", l.dp);
}

// The pipeline's rules: micro-batches, virtual stages and the schedule, and the layers.
void validate_pipeline(const Layout& l, const LayoutFacts& f) {
  auto w = [&](const char* key) { return layout_word(f.words, key); };
  KIRI_CHECK_KIND(kConfig, l.pp == 1 || l.stage() <= 1, w("parallel.zero_stage"), " = ", l.stage(),
                  " with ", w("parallel.pp"), " = ", l.pp,
                  ": pipeline parallelism composes with ZeRO stage 0 or 1 (stages 2 and 3 "
                  "reduce or gather per micro-batch, which kiri's schedules interleave)");
  KIRI_CHECK_KIND(kConfig, l.microbatches >= 1, w("parallel.microbatches"), " = ", l.microbatches,
                  " must be >= 1");
  KIRI_CHECK_KIND(kConfig, l.virtual_stages >= 1, w("parallel.virtual_stages"), " = ",
                  l.virtual_stages, " must be >= 1");
  // One stage of one chunk runs no schedule: parallel.schedule is then unused.
  const bool scheduled = l.pp > 1 || l.virtual_stages > 1;
  if (scheduled && l.schedule != PipelineSchedule::kInterleaved) {
    KIRI_CHECK_KIND(kConfig, l.virtual_stages == 1, w("parallel.virtual_stages"), " = ",
                    l.virtual_stages, " needs schedule interleaved; ", name(l.schedule),
                    " runs exactly 1 chunk per rank");
  } else if (scheduled) {
    KIRI_CHECK_KIND(kConfig, l.virtual_stages >= 2, "interleaved 1F1B needs ",
                    w("parallel.virtual_stages"), " >= 2, got ", l.virtual_stages,
                    " (with 1 chunk per rank use schedule 1f1b)");
    KIRI_CHECK_KIND(kConfig, l.pp >= 2, "interleaved 1F1B needs ", w("parallel.pp"),
                    " >= 2 (it interleaves chunks over pipeline stages), got ", l.pp);
    KIRI_CHECK_KIND(kConfig, l.microbatches % l.pp == 0, "interleaved 1F1B needs ",
                    w("parallel.microbatches"), " (m) to be a multiple of ", w("parallel.pp"),
                    " (p): m = ", l.microbatches, ", p = ", l.pp);
  }
  if (f.n_layer <= 0) return;
  KIRI_CHECK_KIND(kConfig, l.pp <= f.n_layer, w("parallel.pp"), " = ", l.pp, " exceeds ",
                  w("model.n_layer"), " = ", f.n_layer, ": every stage needs a layer");
  KIRI_CHECK_KIND(kConfig, int64_t{l.pp} * l.virtual_stages <= f.n_layer, "interleaved 1F1B needs ",
                  w("model.n_layer"), " (L) >= ", w("parallel.pp"), " (p) x ",
                  w("parallel.virtual_stages"), " (v), so every chunk has a layer: L = ", f.n_layer,
                  ", p = ", l.pp, ", v = ", l.virtual_stages);
}

// Tensor and sequence parallelism against the model's heads, MLP and rows.
void validate_tensor(const Layout& l, const LayoutFacts& f) {
  auto w = [&](const char* key) { return layout_word(f.words, key); };
  if (l.sequence_parallel) {
    KIRI_CHECK_KIND(kConfig, l.tp > 1, w("parallel.sequence_parallel"),
                    " = true splits the sequence over the tensor-parallel ranks: it needs ",
                    w("parallel.tp"), " > 1, got ", w("parallel.tp"), " = ", l.tp);
    const int64_t rows = f.micro_batch * f.seq_len;
    KIRI_CHECK_KIND(kConfig, rows == 0 || rows % l.tp == 0, w("parallel.sequence_parallel"),
                    " = true: the micro-batch's ", w("train.micro_batch"), " x ",
                    w("train.seq_len"), " = ", f.micro_batch, " x ", f.seq_len, " = ", rows,
                    " token rows do not split over ", w("parallel.tp"), " = ", l.tp);
  }
  if (f.n_head > 0) {
    // Megatron's cut: each tp rank keeps whole query heads and whole key/value heads.
    const int kv = f.kv_heads > 0 ? f.kv_heads : f.n_head;
    KIRI_CHECK_KIND(kConfig, f.n_head % l.tp == 0, w("parallel.tp"), " = ", l.tp, " must divide ",
                    w("model.n_head"), " = ", f.n_head,
                    " (tensor parallelism splits attention by heads)");
    KIRI_CHECK_KIND(kConfig, kv % l.tp == 0, w("parallel.tp"), " = ", l.tp, " must divide ",
                    w("model.num_key_value_heads"), " = ", kv, " (", w("model.n_head"), " = ",
                    f.n_head, "): tensor parallelism splits the key/value heads too");
  }
  if (f.mlp_width > 0)
    KIRI_CHECK_KIND(kConfig, f.mlp_width % l.tp == 0, w("parallel.tp"), " = ", l.tp,
                    " must divide the MLP width = ", f.mlp_width);
}

void check_not_cpu(const LayoutFacts& f, const char* key, OffloadTier t, const char* what,
                   std::vector<std::string>& problems) {
  if (t != OffloadTier::kCpu) return;
  const std::string k = layout_word(f.words, key);
  problems.push_back(str(k, " = cpu: on the CPU backend host memory is already where the ", what,
                         " are (the device kiri computes on is the host's RAM); offload moves "
                         "state off the device (device and host memory are the same RAM here), "
                         "and the tier below RAM is NVMe: use ",
                         k, " = nvme, or none"));
}

// Where the stage came from, for the message: the strategy decides when it is set.
std::string stage_source(const Layout& l, const LayoutFacts& f) {
  if (l.sharding_strategy != ShardingStrategy::kFromZeroStage)
    return str("parallel.sharding_strategy = ", name(l.sharding_strategy), " (ZeRO stage ",
               l.stage(), ")");
  return str(layout_word(f.words, "parallel.zero_stage"), " = ", l.zero_stage);
}

// The tiers' rules are independent keys: every broken one is named, in one message.
void validate_offload_tiers(const Layout& l, const Offload& o, const LayoutFacts& f) {
  auto w = [&](const char* key) { return layout_word(f.words, key); };
  std::vector<std::string> problems;
  check_not_cpu(f, "offload.optimizer", o.optimizer, "optimizer states", problems);
  check_not_cpu(f, "offload.parameters", o.parameters, "parameters", problems);
  check_not_cpu(f, "offload.gradients", o.gradients, "gradients", problems);
  const bool optimizer = o.optimizer == OffloadTier::kNvme;
  const std::string got = str(w("offload.optimizer"), " = ", name(o.optimizer));
  // With the parameters on NVMe their rules (stage 3, the optimizer offloaded) cover the
  // gradients' (stage >= 2, the same): one message, not two for one cause.
  const bool gradients = o.gradients == OffloadTier::kNvme && o.parameters != OffloadTier::kNvme;
  if (o.parameters == OffloadTier::kNvme && l.stage() != 3)
    problems.push_back(str(w("offload.parameters"),
                           " = nvme needs ZeRO stage 3 (ZeRO-Infinity: what goes to NVMe is "
                           "each rank's parameter shard), but ",
                           stage_source(l, f), ": set ", w("parallel.zero_stage"),
                           " = 3 (or FULL_SHARD), or ", w("offload.parameters"), " = none"));
  if (o.parameters == OffloadTier::kNvme && !optimizer)
    problems.push_back(str(w("offload.parameters"), " = nvme needs ", w("offload.optimizer"),
                           " = nvme too, got ", got,
                           ": the optimizer states (12 bytes per parameter) leave RAM before "
                           "the parameters (2 to 4)"));
  if (gradients && l.stage() < 2)
    problems.push_back(str(w("offload.gradients"),
                           " = nvme needs ZeRO stage 2 or 3 (what goes to NVMe is each rank's "
                           "gradient shard), but ",
                           stage_source(l, f), " keeps whole gradients: set ",
                           w("parallel.zero_stage"), " = 2 or 3, or ", w("offload.gradients"),
                           " = none"));
  if (gradients && !optimizer)
    problems.push_back(str(w("offload.gradients"), " = nvme needs ", w("offload.optimizer"),
                           " = nvme too, got ", got,
                           ": the optimizer reads the gradients from NVMe with its states"));
  if (problems.empty()) return;
  if (problems.size() == 1) KIRI_RAISE(kConfig, problems.front());
  std::string list;
  for (const std::string& p : problems) list += "\n  - " + p;
  KIRI_RAISE(kConfig, problems.size(),
             " problems with the offload.* keys (docs/offload.md):", list);
}

}  // namespace

void validate_layout(const Layout& l, const LayoutFacts& f, const Offload& offload) {
  auto w = [&](const char* key) { return layout_word(f.words, key); };
  const bool dp_ok = l.dp >= 1 || (l.dp == 0 && f.world == 0);
  KIRI_CHECK_KIND(kConfig, dp_ok && l.tp >= 1 && l.pp >= 1, w("parallel.dp"), " = ", l.dp, ", ",
                  w("parallel.tp"), " = ", l.tp, " and ", w("parallel.pp"), " = ", l.pp,
                  " must each be >= 1");
  if (f.world > 0) validate_world(l.dp, l.tp, l.pp, f.world, f.words);
  validate_sharding(l, f);
  validate_pipeline(l, f);
  validate_tensor(l, f);
  KIRI_CHECK_KIND(kConfig,
                  l.activation_checkpointing != ActivationCheckpointing::kEveryK ||
                      l.activation_checkpointing_k >= 1,
                  w("parallel.activation_checkpointing"), " = every_k needs ",
                  w("parallel.activation_checkpointing_k"), " >= 1, got ",
                  l.activation_checkpointing_k);
  validate_offload_tiers(l, offload, f);
}

}  // namespace kiri
