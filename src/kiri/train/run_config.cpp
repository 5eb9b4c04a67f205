#include "kiri/train/run_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiri/train/offload_config.h"

namespace kiri::train {

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}
}  // namespace

RunConfig resolve_run_paths(RunConfig c) {
  KIRI_CHECK_KIND(kConfig, !c.run.name.empty() && c.run.name.find('/') == std::string::npos,
                  "run.name must be a non-empty name without '/' (use run.dir for a path), got '",
                  c.run.name, "'");
  replace_all(c.run.dir, "{run.name}", c.run.name);
  KIRI_CHECK_KIND(kConfig, !c.run.dir.empty(), "run.dir must not be empty");
  KIRI_CHECK_KIND(kConfig, c.run.dir.find("{run.dir}") == std::string::npos, "run.dir = '",
                  c.run.dir, "' cannot name itself");
  for (std::string* path :
       {&c.checkpoint.dir, &c.log.metrics, &c.log.plot, &c.log.trace, &c.offload.path})
    replace_all(*path, "{run.dir}", c.run.dir);
  return c;
}

std::string plot_path(const LogConfig& log) {
  if (!log.plot.empty() || log.metrics.empty()) return log.plot;
  return std::filesystem::path(log.metrics).replace_extension(".png").string();
}

std::optional<std::string> resolve_layout(ParallelConfig& p, int world_size) {
  const int64_t model = int64_t{p.tp} * p.pp;
  const char* hint = world_size == 1 ? " (start the ranks with kiri launch -n N)" : "";
  if (p.dp != 0) {
    validate_world(p.dp, p.tp, p.pp, world_size, LayoutWords::kConfig);
    return std::nullopt;
  }
  KIRI_CHECK_KIND(kConfig, model >= 1 && world_size % model == 0,
                  "cannot infer parallel.dp: world ", world_size, " is not a multiple of tp ", p.tp,
                  " x pp ", p.pp, " = ", model, " (dp = world / (tp x pp)); run a multiple of ",
                  model, " processes or change parallel.tp / parallel.pp", hint);
  p.dp = static_cast<int>(world_size / model);
  return str("layout: dp ", p.dp, " inferred = world ", world_size, " / (tp ", p.tp, " x pp ", p.pp,
             ")");
}

int64_t global_batch(const RunConfig& c) {
  return c.train.micro_batch * c.parallel.microbatches * c.train.grad_accum * c.parallel.dp;
}

std::string scale_learning_rate(TrainConfig& t, int64_t batch) {
  if (t.lr_scaling == LrScaling::kNone) return "";
  const bool sqrt = t.lr_scaling == LrScaling::kSqrt;
  const int64_t base = t.base_batch == 0 ? batch : t.base_batch;
  const double ratio = static_cast<double>(batch) / static_cast<double>(base);
  const double factor = sqrt ? std::sqrt(ratio) : ratio;
  const double lr = t.optimizer.lr, min_lr = t.min_lr;
  t.optimizer.lr = lr * factor;
  t.min_lr = min_lr * factor;
  t.warmup_lr *= factor;  // the DeepSpeed schedules' warm-up start keeps its ratio to lr
  t.base_batch = batch;
  return str("lr ", num(lr), " x ", sqrt ? "sqrt" : "", "(", batch, "/", base,
             ") = ", num(t.optimizer.lr), ", min_lr ", num(min_lr), " -> ", num(t.min_lr),
             " (train.lr_scaling ", sqrt ? "sqrt" : "linear", ", train.base_batch ", base,
             "; global batch ", batch, " sequences)");
}

model::SelectiveRecompute selective_recompute(const ParallelConfig& p) {
  return kiri::recompute_modules_of(p.activation_checkpointing, p.recompute_modules,
                                    kiri::LayoutWords::kConfig);
}

namespace {

ShardingStrategy parse_strategy(const std::string& s) {
  for (ShardingStrategy k : {ShardingStrategy::kFromZeroStage, ShardingStrategy::kNoShard,
                             ShardingStrategy::kShardGradOp, ShardingStrategy::kFullShard,
                             ShardingStrategy::kHybridShard})
    if (s == name(k)) return k;
  KIRI_RAISE(kConfig,
             "parallel.sharding_strategy must be NO_SHARD, SHARD_GRAD_OP, FULL_SHARD or "
             "HYBRID_SHARD, got '",
             s, "'");
}

PipelineSchedule parse_schedule(const std::string& s) {
  for (PipelineSchedule k :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved})
    if (s == name(k)) return k;
  KIRI_RAISE(kConfig, "parallel.schedule = \"", s,
             "\" is not a pipeline schedule; allowed: gpipe, 1f1b, interleaved");
}

Precision layout_dtype(ComputeDType d) {
  switch (d) {
    case ComputeDType::kBF16:
      return Precision::kBf16;
    case ComputeDType::kF16:
      return Precision::kFp16;
    case ComputeDType::kF32:
      break;
  }
  return Precision::kFp32;
}

OffloadTier tier(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::kCpu:
      return OffloadTier::kCpu;
    case OffloadDevice::kNvme:
      return OffloadTier::kNvme;
    default:
      return OffloadTier::kNone;
  }
}

}  // namespace

kiri::Layout layout_of(const RunConfig& c) {
  const ParallelConfig& p = c.parallel;
  kiri::Layout l;
  l.dp = p.dp;
  l.tp = p.tp;
  l.pp = p.pp;
  l.zero_stage = p.zero_stage;
  l.sharding_strategy = parse_strategy(p.sharding_strategy);
  l.shard_group_size = p.shard_group_size;
  l.activation_checkpointing = p.activation_checkpointing;
  l.activation_checkpointing_k = p.activation_checkpointing_k;
  // selective: its modules (kConfig: an unknown one, or modules without selective)
  const model::SelectiveRecompute modules = selective_recompute(p);
  if (p.activation_checkpointing == ActivationCheckpointing::kSelective)
    l.recompute_modules = modules;
  l.sequence_parallel = p.sequence_parallel;
  l.schedule = parse_schedule(p.schedule);
  l.microbatches = p.microbatches;
  l.virtual_stages = p.virtual_stages;
  l.dtype = layout_dtype(c.train.dtype);
  const OffloadConfig& o = c.offload;
  l.offload.optimizer = tier(o.optimizer);
  l.offload.parameters = tier(o.parameters);
  // auto: nvme with the parameters (ZeRO-Infinity), else none; cpu stays cpu (refused).
  l.offload.gradients = o.gradients == OffloadDevice::kCpu ? OffloadTier::kCpu
                        : offload_gradients(o)             ? OffloadTier::kNvme
                                                           : OffloadTier::kNone;
  // The swap I/O shape as the trainer reads it (the planner sizes offloaded layouts with it
  // under --auto, offload on or off); with offload off a bad block size is unused, not named.
  l.offload.buffer_count = o.buffer_count;
  l.offload.buffer_bytes = offload_buffer_bytes(o);
  l.offload.queue_depth = o.queue_depth;
  try {
    l.offload.block_size = offload_block_bytes(o);
  } catch (const Error&) {
    if (l.offload.any()) throw;
  }
  return l;
}

kiri::LayoutFacts layout_facts(const RunConfig& c, int world) {
  kiri::LayoutFacts f;
  f.world = world;
  f.n_layer = static_cast<int>(c.model.n_layer);
  f.n_head = static_cast<int>(c.model.n_head);
  f.kv_heads = static_cast<int>(c.model.kv_heads());
  f.mlp_width = c.model.mlp_width();
  f.micro_batch = c.train.micro_batch;
  f.seq_len = c.train.seq_len;
  return f;
}

void check_layout(const RunConfig& c, int world) {
  kiri::validate_layout(layout_of(c), layout_facts(c, world));
}

}  // namespace kiri::train
