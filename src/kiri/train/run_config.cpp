#include "kiri/train/run_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

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
    const int64_t product = p.dp * model;
    KIRI_CHECK_KIND(kConfig, product == world_size, "parallel.dp x tp x pp = ", p.dp, " x ", p.tp,
                    " x ", p.pp, " = ", product, " but the world has ", world_size, " process(es)",
                    world_size % model == 0
                        ? str(" (leave parallel.dp unset to infer dp = world ", world_size,
                              " / (tp ", p.tp, " x pp ", p.pp, ") = ", world_size / model, ")")
                        : std::string(hint));
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
  if (p.activation_checkpointing != ActivationCheckpointing::kSelective) {
    KIRI_CHECK_KIND(kConfig, p.recompute_modules.empty(), "parallel.recompute_modules (",
                    p.recompute_modules.size(),
                    " given) needs parallel.activation_checkpointing = selective");
    return {};
  }
  if (p.recompute_modules.empty()) return model::parse_recompute_modules({"core_attn"});
  return model::parse_recompute_modules(p.recompute_modules);
}

ShardLayout resolve_sharding(const ParallelConfig& p) {
  ShardLayout out{p.zero_stage, p.shard_group_size};
  KIRI_CHECK_KIND(kConfig, p.zero_stage >= 0 && p.zero_stage <= 3,
                  "parallel.zero_stage must be 0, 1, 2 or 3, got ", p.zero_stage);
  // dp = 0 (inferred) is checked again once the world resolves it.
  const bool dp_known = p.dp != 0;
  if (!p.sharding_strategy.empty()) {
    const std::string& s = p.sharding_strategy;
    int stage = -1;
    if (s == "NO_SHARD") stage = 0;
    if (s == "SHARD_GRAD_OP") stage = 2;
    if (s == "FULL_SHARD" || s == "HYBRID_SHARD") stage = 3;
    KIRI_CHECK_KIND(kConfig, stage >= 0,
                    "parallel.sharding_strategy must be NO_SHARD, "
                    "SHARD_GRAD_OP, FULL_SHARD or HYBRID_SHARD, got '",
                    s, "'");
    KIRI_CHECK_KIND(kConfig, p.zero_stage == 0 || p.zero_stage == stage,
                    "parallel.zero_stage = ", p.zero_stage,
                    " contradicts parallel.sharding_strategy = ", s, " (ZeRO stage ", stage,
                    "); set one of them");
    out.stage = stage;
    if (dp_known && s == "HYBRID_SHARD") {
      KIRI_CHECK_KIND(
          kConfig,
          p.shard_group_size > 1 && p.shard_group_size < p.dp && p.dp % p.shard_group_size == 0,
          "HYBRID_SHARD needs parallel.shard_group_size dividing parallel.dp = ", p.dp,
          " and between 2 and dp - 1 (shard within a group, replicate across "
          "groups), got ",
          p.shard_group_size);
    } else if (dp_known) {
      KIRI_CHECK_KIND(kConfig, p.shard_group_size == 0 || p.shard_group_size == p.dp,
                      "parallel.shard_group_size = ", p.shard_group_size, " is for HYBRID_SHARD; ",
                      s, " shards over the whole dp group");
    }
  }
  if (out.group_size != 0)
    KIRI_CHECK_KIND(kConfig, out.stage >= 1 && (!dp_known || p.dp % out.group_size == 0),
                    "parallel.shard_group_size = ", out.group_size,
                    " needs a ZeRO stage >= 1 and must divide parallel.dp = ", p.dp);
  return out;
}

}  // namespace kiri::train
