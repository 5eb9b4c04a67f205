#pragma once
// One layout: how a training step is cut over the ranks (dp x tp x pp, ZeRO stage or
// sharding strategy, shard group, activation checkpointing, sequence parallelism, the
// pipeline's schedule, micro-batches and virtual stages, dtype, offload tiers), and the
// one function that validates it (torchtitan's ParallelDims: every rule once, every
// number in its message). The config's parallel.* keys are this struct (RunConfig::parallel);
// the trainer, `kiri plan` (plan::Layout derives from it) and `kiri train --auto` all
// validate through it. It sits in config, on base alone, because the planner does too.
#include <cstdint>
#include <string>
#include <vector>

namespace kiri {

// parallel.activation_checkpointing / --activation-checkpointing. kSelective recomputes
// the modules of parallel.recompute_modules (default Megatron's core_attn; docs/parallelism.md).
enum class ActivationCheckpointing { kNone, kFull, kEveryK, kSelective };
enum class PipelineSchedule { kGpipe, k1F1B, kInterleaved };
enum class Precision { kFp32, kBf16, kFp16 };
// Where a category of the training state lives. kiri's CPU backend refuses kCpu (device
// and host memory are the same RAM): the tier below RAM is NVMe. kAuto is offload.gradients'
// only (nvme when the parameters are offloaded, else none; offload_spec resolves it).
enum class OffloadTier { kNone, kCpu, kNvme, kAuto };
// FSDP's words for the ZeRO stage (kFromZeroStage: zero_stage decides).
enum class ShardingStrategy { kFromZeroStage, kNoShard, kShardGradOp, kFullShard, kHybridShard };

const char* name(ActivationCheckpointing a);  // none | full | every_k | selective
const char* name(PipelineSchedule s);         // gpipe | 1f1b | interleaved
const char* name(Precision p);                // fp32 | bf16 | fp16
const char* name(OffloadTier t);              // none | cpu | nvme | auto
const char* name(ShardingStrategy s);         // "" | NO_SHARD | ... | HYBRID_SHARD

// Selective recomputation (Megatron-core's --recompute-modules): what every block does not
// keep for backward and computes again there (model/layers.h; docs/parallelism.md).
//   core_attn  the attention core's output and log-sum-exp (it keeps only its input, qkv)
//   layernorm  the norms' outputs, the column-parallel regions' inputs X_region
//   mlp_act    the MLP activation's output, the down projection's input
// Default-constructed: none (a model that recomputes nothing).
struct RecomputeModules {
  bool core_attn = false, layernorm = false, mlp_act = false;
  bool any() const { return core_attn || layernorm || mlp_act; }
  bool operator==(const RecomputeModules&) const = default;
};
// The modules' names, as parallel.recompute_modules and --recompute-modules spell them.
const std::vector<std::string>& recompute_module_names();
// "core_attn,mlp_act" (the names of the modules set, comma-separated; "" for none).
std::string name(const RecomputeModules& m);

// Whose words a message uses: the config's keys (parallel.zero_stage) or `kiri plan`'s
// options (--zero-stage). Both name the same things.
enum class LayoutWords { kConfig, kPlan };
// From names (kConfig naming an unknown one and the valid ones).
RecomputeModules parse_recompute_modules(const std::vector<std::string>& names, LayoutWords words);
// The modules a layout recomputes: selective recomputes `names` (none given: Megatron's
// default, core_attn); any other activation_checkpointing recomputes none, and refuses names
// (kConfig: the modules need selective). One parser and one message for config and kiri plan.
RecomputeModules recompute_modules_of(ActivationCheckpointing a,
                                      const std::vector<std::string>& names, LayoutWords words);

// The offload tiers, with the staging pool and I/O shape the swap files stream with.
struct Offload {
  OffloadTier optimizer = OffloadTier::kNone;   // fp32 master (16-bit runs), Adam m and v
  OffloadTier parameters = OffloadTier::kNone;  // ZeRO stage 3: the parameter shard
  OffloadTier gradients = OffloadTier::kNone;   // ZeRO stage 2-3: the gradient shard
  int buffer_count = 4;                         // staging buffers per rank
  int64_t buffer_bytes = int64_t{64} << 20;     // each
  int64_t block_size = int64_t{1} << 20;        // bytes per request
  int queue_depth = 8;                          // requests in flight
  bool any() const {
    return optimizer != OffloadTier::kNone || parameters != OffloadTier::kNone ||
           gradients != OffloadTier::kNone;
  }
};

// The parallel.* keys (RunConfig::parallel): how the step is cut, typed. The precision and the
// offload tiers are the train.dtype and offload.* keys; validate_layout takes the tiers
// (offload_spec) beside the layout.
struct Layout {
  int dp = 1, tp = 1, pp = 1;     // dp 0: inferred from the world (resolve_layout)
  double bucket_mb = 25;          // DDP gradient bucket size
  double timeout_s = 300;         // per collective; a rank that never arrives is named after it
  int link_probe_every = 10;      // steps between probes of the links between hosts; 0 = none
  bool check_collectives = true;  // ranks agree on each collective's kind and size first
  // ZeRO stage (DeepSpeed's vocabulary) or sharding strategy (FSDP's); the strategy, when
  // set, decides: NO_SHARD = 0, SHARD_GRAD_OP = 2, FULL_SHARD = 3, HYBRID_SHARD = 3 within
  // groups of shard_group_size.
  int zero_stage = 0;  // 0 = DDP, 1 = P_os, 2 = P_os+g, 3 = P_os+g+p
  ShardingStrategy sharding_strategy = ShardingStrategy::kFromZeroStage;
  int shard_group_size = 0;  // ranks a ZeRO shard spans; 0 = all of dp
  int wrap_blocks = 1;       // transformer blocks per sharding unit
  bool prefetch = true;      // stage 3: all-gather the next unit early
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;
  int activation_checkpointing_k = 2;  // every_k: blocks 0, k, 2k, ... recompute
  // selective: what every block recomputes, by name (recompute() parses them); empty:
  // {"core_attn"}, Megatron's default. The other modes refuse names.
  std::vector<std::string> recompute_modules{};
  bool sequence_parallel = false;  // tp > 1: norms and residual split over the sequence
  // Pipeline parallelism (pp > 1): the schedule, the micro-batches m that one step's batch is
  // split into (rows per rank = micro_batch x m), and the model chunks per rank
  // (interleaved only).
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int microbatches = 1;
  int virtual_stages = 1;

  int world() const { return dp * tp * pp; }
  // The effective ZeRO stage: the sharding strategy's when one is set.
  int stage() const;
  // Ranks one ZeRO shard spans: shard_group_size, or all of dp.
  int shard_size() const { return shard_group_size > 0 ? shard_group_size : dp; }
  // Blocks between checkpointed ones: 0 none (and selective), 1 full, k every_k.
  int checkpoint_every() const;
  // The modules selective recomputation recomputes (none for the other modes, whatever the
  // names: the planner tries modes over one layout); kConfig in `words` for an unknown
  // module. recompute_modules_of refuses names without selective (check_layout does).
  RecomputeModules recompute(LayoutWords words) const;
  RecomputeModules recompute() const;
};

// "parallel.zero_stage" in kPlan words: "--zero-stage" (offload.parameters:
// --offload-parameters; parallel.microbatches: the micro-batches m, which kiri plan
// derives from the batch).
std::string layout_word(LayoutWords words, const std::string& config_key);

// What the rules check the layout against; 0 = not known (the rule waits).
struct LayoutFacts {
  int world = 0;  // processes; 0: not started yet (dp 0 is then "inferred")
  int n_layer = 0, n_head = 0;
  int kv_heads = 0;                      // LLaMA's key/value heads; 0: as many as n_head (GPT-2)
  int64_t mlp_width = 0;                 // the MLP's hidden width (tp splits it)
  int64_t micro_batch = 0, seq_len = 0;  // sequence parallelism splits their rows over tp
  LayoutWords words = LayoutWords::kConfig;
};

// Every layout rule, each raising kConfig with its own message naming the keys and
// numbers: the degrees (>= 1) and world = dp x tp x pp; ZeRO stage 0-3, a sharding
// strategy that agrees with it, HYBRID_SHARD's group (2..dp-1, dividing dp), a shard
// group only for HYBRID_SHARD or zero_stage >= 1 and dividing dp; pp > 1 needs ZeRO <= 1;
// sequence parallelism needs tp > 1 and tp dividing micro_batch x seq_len; every_k's
// k >= 1; micro-batches >= 1; with pp > 1 or virtual stages > 1 (else no schedule runs):
// virtual stages only for interleaved, which needs pp >= 2, virtual stages >= 2 and
// micro-batches a multiple of pp; pp <= layers and pp x v <=
// layers; tp divides the heads (and LLaMA's key/value heads) and the MLP width; offload:
// no cpu tier, parameters need ZeRO 3 and the optimizer offloaded, gradients ZeRO >= 2 and
// the optimizer offloaded (the tiers of `offload`, auto resolved: offload_spec).
void validate_layout(const Layout& layout, const LayoutFacts& facts, const Offload& offload = {});

// world = dp x tp x pp (the rule validate_layout applies; resolve_layout's too).
void validate_world(int dp, int tp, int pp, int world, LayoutWords words);

}  // namespace kiri
