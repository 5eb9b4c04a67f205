// Every layout rule of kiri::validate_layout, one case each: the layout that breaks it alone
// and its whole message, numbers included; then the words of `kiri plan`, and layouts that
// pass.
#include "kiri/config/layout.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kiri/base/error.h"

namespace kiri {
namespace {

// A layout with the offload tiers that validate_layout takes beside it (the config's
// offload.*, as plan::Layout holds them).
struct Cut : Layout {
  Offload offload;
};

struct Rule {
  const char* name;
  std::function<void(Cut&, LayoutFacts&)> set;
  const char* message;  // the whole message
};

// A model of 8 layers, 8 heads (2 key/value heads), MLP 64, micro-batches of 4 x 16 rows.
LayoutFacts model_facts() {
  LayoutFacts f;
  f.n_layer = 8;
  f.n_head = 8;
  f.kv_heads = 2;
  f.mlp_width = 64;
  f.micro_batch = 4;
  f.seq_len = 16;
  return f;
}

std::string message_of(const Cut& l, const LayoutFacts& f) {
  try {
    validate_layout(l, f, l.offload);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.message();
  }
  return "(accepted)";
}

const std::vector<Rule>& rules() {
  using AC = ActivationCheckpointing;
  static const std::vector<Rule> r = {
      {"degrees", [](Cut& l, LayoutFacts&) { l.tp = 0; },
       "parallel.dp = 1, parallel.tp = 0 and parallel.pp = 1 must each be >= 1"},
      {"world",
       [](Cut& l, LayoutFacts& f) {
         l.dp = 2;
         f.world = 4;
       },
       "parallel.dp x tp x pp = 2 x 1 x 1 = 2 but the world has 4 process(es) (leave "
       "parallel.dp unset to infer dp = world 4 / (tp 1 x pp 1) = 4)"},
      {"zero stage range", [](Cut& l, LayoutFacts&) { l.zero_stage = 4; },
       "parallel.zero_stage must be 0, 1, 2 or 3, got 4"},
      {"strategy contradicts stage",
       [](Cut& l, LayoutFacts&) {
         l.zero_stage = 1;
         l.sharding_strategy = ShardingStrategy::kFullShard;
       },
       "parallel.zero_stage = 1 contradicts parallel.sharding_strategy = FULL_SHARD (ZeRO "
       "stage 3); set one of them"},
      {"shard group sign", [](Cut& l, LayoutFacts&) { l.shard_group_size = -1; },
       "parallel.shard_group_size must be >= 0, got -1"},
      {"hybrid group",
       [](Cut& l, LayoutFacts&) {
         l.dp = 4;
         l.sharding_strategy = ShardingStrategy::kHybridShard;
         l.shard_group_size = 4;
       },
       "HYBRID_SHARD needs parallel.shard_group_size dividing parallel.dp = 4 and between 2 "
       "and dp - 1 (shard within a group, replicate across groups), got 4"},
      {"shard group only for hybrid",
       [](Cut& l, LayoutFacts&) {
         l.dp = 4;
         l.sharding_strategy = ShardingStrategy::kFullShard;
         l.shard_group_size = 2;
       },
       "parallel.shard_group_size = 2 is for HYBRID_SHARD; FULL_SHARD shards over the whole dp "
       "group"},
      {"shard group needs a stage",
       [](Cut& l, LayoutFacts&) {
         l.dp = 4;
         l.shard_group_size = 2;
       },
       "parallel.shard_group_size = 2 needs a ZeRO stage >= 1 (parallel.zero_stage = 0 shards "
       "nothing)"},
      {"shard group divides dp",
       [](Cut& l, LayoutFacts&) {
         l.dp = 6;
         l.zero_stage = 1;
         l.shard_group_size = 4;
       },
       "parallel.shard_group_size = 4 must divide parallel.dp = 6"},
      {"pp needs ZeRO <= 1",
       [](Cut& l, LayoutFacts&) {
         l.pp = 2;
         l.zero_stage = 2;
       },
       "parallel.zero_stage = 2 with parallel.pp = 2: pipeline parallelism composes with ZeRO "
       "stage 0 or 1 (stages 2 and 3 reduce or gather per micro-batch, which kiri's schedules "
       "interleave)"},
      {"micro-batches", [](Cut& l, LayoutFacts&) { l.microbatches = 0; },
       "parallel.microbatches = 0 must be >= 1"},
      {"virtual stages", [](Cut& l, LayoutFacts&) { l.virtual_stages = 0; },
       "parallel.virtual_stages = 0 must be >= 1"},
      {"virtual stages need interleaved",
       [](Cut& l, LayoutFacts&) {
         l.pp = 2;
         l.virtual_stages = 2;
       },
       "parallel.virtual_stages = 2 needs schedule interleaved; 1f1b runs exactly 1 chunk per "
       "rank"},
      {"interleaved needs v >= 2",
       [](Cut& l, LayoutFacts&) {
         l.pp = 2;
         l.schedule = PipelineSchedule::kInterleaved;
       },
       "interleaved 1F1B needs parallel.virtual_stages >= 2, got 1 (with 1 chunk per rank use "
       "schedule 1f1b)"},
      {"interleaved needs pp >= 2",
       [](Cut& l, LayoutFacts&) {
         l.schedule = PipelineSchedule::kInterleaved;
         l.virtual_stages = 2;
       },
       "interleaved 1F1B needs parallel.pp >= 2 (it interleaves chunks over pipeline stages), "
       "got 1"},
      {"interleaved m multiple of pp",
       [](Cut& l, LayoutFacts&) {
         l.pp = 4;
         l.schedule = PipelineSchedule::kInterleaved;
         l.virtual_stages = 2;
         l.microbatches = 6;
       },
       "interleaved 1F1B needs parallel.microbatches (m) to be a multiple of parallel.pp (p): "
       "m = 6, p = 4"},
      {"pp within the layers", [](Cut& l, LayoutFacts&) { l.pp = 9; },
       "parallel.pp = 9 exceeds model.n_layer = 8: every stage needs a layer"},
      {"chunks within the layers",
       [](Cut& l, LayoutFacts&) {
         l.pp = 4;
         l.schedule = PipelineSchedule::kInterleaved;
         l.virtual_stages = 3;
         l.microbatches = 4;
       },
       "interleaved 1F1B needs model.n_layer (L) >= parallel.pp (p) x parallel.virtual_stages "
       "(v), so every chunk has a layer: L = 8, p = 4, v = 3"},
      {"sequence parallel needs tp", [](Cut& l, LayoutFacts&) { l.sequence_parallel = true; },
       "parallel.sequence_parallel = true splits the sequence over the tensor-parallel ranks: "
       "it needs parallel.tp > 1, got parallel.tp = 1"},
      {"sequence parallel rows",
       [](Cut& l, LayoutFacts& f) {
         l.tp = 2;
         l.sequence_parallel = true;
         f.micro_batch = 3;
         f.seq_len = 5;
       },
       "parallel.sequence_parallel = true: the micro-batch's train.micro_batch x train.seq_len "
       "= 3 x 5 = 15 token rows do not split over parallel.tp = 2"},
      {"tp divides the heads", [](Cut& l, LayoutFacts&) { l.tp = 3; },
       "parallel.tp = 3 must divide model.n_head = 8 (tensor parallelism splits attention by "
       "heads)"},
      {"tp divides the key/value heads", [](Cut& l, LayoutFacts&) { l.tp = 4; },
       "parallel.tp = 4 must divide model.num_key_value_heads = 2 (model.n_head = 8): tensor "
       "parallelism splits the key/value heads too"},
      {"tp divides the MLP",
       [](Cut& l, LayoutFacts& f) {
         l.tp = 2;
         f.mlp_width = 63;
       },
       "parallel.tp = 2 must divide the MLP width = 63"},
      {"every_k's k",
       [](Cut& l, LayoutFacts&) {
         l.activation_checkpointing = AC::kEveryK;
         l.activation_checkpointing_k = 0;
       },
       "parallel.activation_checkpointing = every_k needs parallel.activation_checkpointing_k "
       ">= 1, got 0"},
      {"no cpu tier (optimizer)",
       [](Cut& l, LayoutFacts&) { l.offload.optimizer = OffloadTier::kCpu; },
       "offload.optimizer = cpu: on the CPU backend host memory is already where the optimizer "
       "states are "
       "(the device kiri computes on is the host's RAM); offload moves state off the device "
       "(device and host memory are the same RAM here), and the tier below RAM is NVMe: use "
       "offload.optimizer = nvme, or none"},
      {"no cpu tier (parameters)",
       [](Cut& l, LayoutFacts&) { l.offload.parameters = OffloadTier::kCpu; },
       "offload.parameters = cpu: on the CPU backend host memory is already where the parameters "
       "are "
       "(the device kiri computes on is the host's RAM); offload moves state off the device "
       "(device and host memory are the same RAM here), and the tier below RAM is NVMe: use "
       "offload.parameters = nvme, or none"},
      {"no cpu tier (gradients)",
       [](Cut& l, LayoutFacts&) { l.offload.gradients = OffloadTier::kCpu; },
       "offload.gradients = cpu: on the CPU backend host memory is already where the gradients are "
       "(the device kiri computes on is the host's RAM); offload moves state off the device "
       "(device and host memory are the same RAM here), and the tier below RAM is NVMe: use "
       "offload.gradients = nvme, or none"},
      {"parameter offload needs ZeRO 3",
       [](Cut& l, LayoutFacts&) {
         l.zero_stage = 2;
         l.offload.optimizer = l.offload.parameters = OffloadTier::kNvme;
       },
       "offload.parameters = nvme needs ZeRO stage 3 (ZeRO-Infinity: what goes to NVMe is each "
       "rank's parameter shard), but parallel.zero_stage = 2: set parallel.zero_stage = 3 (or "
       "FULL_SHARD), or offload.parameters = none"},
      {"parameter offload needs optimizer offload",
       [](Cut& l, LayoutFacts&) {
         l.zero_stage = 3;
         l.offload.parameters = OffloadTier::kNvme;
       },
       "offload.parameters = nvme needs offload.optimizer = nvme too, got offload.optimizer = "
       "none: the optimizer "
       "states (12 bytes per parameter) leave RAM before the parameters (2 to 4)"},
      {"gradient offload needs ZeRO >= 2",
       [](Cut& l, LayoutFacts&) {
         l.zero_stage = 1;
         l.offload.optimizer = l.offload.gradients = OffloadTier::kNvme;
       },
       "offload.gradients = nvme needs ZeRO stage 2 or 3 (what goes to NVMe is each rank's "
       "gradient shard), but parallel.zero_stage = 1 keeps whole gradients: set "
       "parallel.zero_stage = 2 or 3, or offload.gradients = none"},
      {"gradient offload needs optimizer offload",
       [](Cut& l, LayoutFacts&) {
         l.zero_stage = 2;
         l.offload.gradients = OffloadTier::kNvme;
       },
       "offload.gradients = nvme needs offload.optimizer = nvme too, got offload.optimizer = "
       "none: the optimizer "
       "reads the gradients from NVMe with its states"},
  };
  return r;
}

TEST(Layout, EachRuleRaisesItsOwnMessageWithTheNumbers) {
  for (const Rule& rule : rules()) {
    Cut l;
    LayoutFacts f = model_facts();
    rule.set(l, f);
    EXPECT_EQ(message_of(l, f), rule.message) << rule.name;
  }
}

TEST(Layout, EveryRuleHasItsOwnMessage) {
  std::vector<std::string> seen;
  for (const Rule& rule : rules()) {
    for (const std::string& s : seen) EXPECT_NE(s, rule.message) << rule.name;
    seen.push_back(rule.message);
  }
  EXPECT_EQ(seen.size(), 31u);
}

// The offload tiers are independent keys: every broken tier rule is named, in one message.
TEST(Layout, OffloadTierProblemsAreNamedTogether) {
  Cut l;
  l.zero_stage = 1;
  l.offload.parameters = OffloadTier::kNvme;
  const std::string e = message_of(l, model_facts());
  EXPECT_EQ(e.rfind("2 problems with the offload.* keys (docs/offload.md):\n  - "
                    "offload.parameters = nvme needs ZeRO stage 3",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("\n  - offload.parameters = nvme needs offload.optimizer = nvme too"),
            std::string::npos)
      << e;
}

TEST(Layout, KiriPlanGetsTheSameRulesInItsOptionWords) {
  Cut l;
  l.pp = 2;
  l.zero_stage = 2;
  LayoutFacts f = model_facts();
  f.words = LayoutWords::kPlan;
  EXPECT_EQ(message_of(l, f),
            "--zero-stage = 2 with --pp = 2: pipeline parallelism composes with ZeRO stage 0 or "
            "1 (stages 2 and 3 reduce or gather per micro-batch, which kiri's schedules "
            "interleave)");
  l = Cut{};
  l.dp = 4;
  l.shard_group_size = 2;
  EXPECT_EQ(message_of(l, f),
            "--shard-group-size = 2 needs a ZeRO stage >= 1 (--zero-stage = 0 shards nothing)");
  l = Cut{};
  l.tp = 3;
  EXPECT_EQ(message_of(l, f),
            "--tp = 3 must divide --heads = 8 (tensor parallelism splits attention by heads)");
  l = Cut{};
  l.dp = 2;
  f.world = 3;
  EXPECT_EQ(message_of(l, f), "--dp x --tp x --pp = 2 x 1 x 1 = 2 but the world has 3 process(es)");
  EXPECT_EQ(layout_word(LayoutWords::kPlan, "parallel.activation_checkpointing"),
            "--activation-checkpointing");
  EXPECT_EQ(layout_word(LayoutWords::kPlan, "offload.parameters"), "--offload-parameters");
  EXPECT_EQ(layout_word(LayoutWords::kConfig, "parallel.zero_stage"), "parallel.zero_stage");
}

TEST(Layout, ValidLayoutsPassAndTheStrategyDecidesTheStage) {
  Cut l;
  l.dp = 2;
  l.tp = 2;
  l.pp = 2;
  l.zero_stage = 1;
  l.schedule = PipelineSchedule::kInterleaved;
  l.virtual_stages = 2;
  l.microbatches = 4;
  l.sequence_parallel = true;
  LayoutFacts f = model_facts();
  f.world = 8;
  EXPECT_EQ(message_of(l, f), "(accepted)");
  // One stage of one chunk runs no schedule: interleaved is unused, not refused.
  Cut one;
  one.schedule = PipelineSchedule::kInterleaved;
  EXPECT_EQ(message_of(one, model_facts()), "(accepted)");
  // dp 0 is "inferred" before the world is known.
  Cut inferred;
  inferred.dp = 0;
  EXPECT_EQ(message_of(inferred, model_facts()), "(accepted)");
  Cut hybrid;
  hybrid.dp = 4;
  hybrid.sharding_strategy = ShardingStrategy::kHybridShard;
  hybrid.shard_group_size = 2;
  hybrid.offload.optimizer = hybrid.offload.parameters = OffloadTier::kNvme;
  EXPECT_EQ(hybrid.stage(), 3);
  EXPECT_EQ(hybrid.shard_size(), 2);
  EXPECT_EQ(message_of(hybrid, model_facts()), "(accepted)");
  Cut every;
  every.activation_checkpointing = ActivationCheckpointing::kEveryK;
  every.activation_checkpointing_k = 3;
  EXPECT_EQ(every.checkpoint_every(), 3);
  every.activation_checkpointing = ActivationCheckpointing::kFull;
  EXPECT_EQ(every.checkpoint_every(), 1);
}

// Selective's modules: Megatron's default, the names both ways, and the two rules (an
// unknown module; modules without selective) in the config's and kiri plan's words.
TEST(Layout, RecomputeModulesParsedOnceInBothWords) {
  using A = ActivationCheckpointing;
  const std::vector<std::string> none;
  Layout selective;
  selective.activation_checkpointing = A::kSelective;
  EXPECT_EQ(selective.recompute(), RecomputeModules{.core_attn = true});
  EXPECT_EQ(Layout{}.recompute(), RecomputeModules{});
  EXPECT_EQ(recompute_modules_of(A::kSelective, none, LayoutWords::kConfig),
            RecomputeModules{.core_attn = true});
  EXPECT_EQ(recompute_modules_of(A::kNone, none, LayoutWords::kConfig), RecomputeModules{});
  const RecomputeModules two =
      recompute_modules_of(A::kSelective, {"mlp_act", "layernorm"}, LayoutWords::kPlan);
  EXPECT_EQ(two, (RecomputeModules{.layernorm = true, .mlp_act = true}));
  EXPECT_EQ(name(two), "layernorm,mlp_act");
  auto message = [](A a, const std::vector<std::string>& names, LayoutWords w) {
    try {
      recompute_modules_of(a, names, w);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(A::kSelective, {"core_attn", "moe_act"}, LayoutWords::kConfig),
            "parallel.recompute_modules: unknown module 'moe_act' (valid: core_attn, layernorm, "
            "mlp_act)");
  EXPECT_EQ(message(A::kFull, {"layernorm"}, LayoutWords::kConfig),
            "parallel.recompute_modules (1 given) needs parallel.activation_checkpointing = "
            "selective");
  EXPECT_EQ(message(A::kNone, {"core_attn", "mlp_act"}, LayoutWords::kPlan),
            "--recompute-modules (2 given) needs --activation-checkpointing = selective");
}

}  // namespace
}  // namespace kiri
