#include "kiri/config/run_config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "kiri/base/error.h"

#include "kiri/config/offload_config.h"

namespace kiri {

namespace {
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Whether `path` lies under `dir`, comparing the paths as written (`.` and `..` resolved).
bool lexically_inside(const std::filesystem::path& path, const std::string& dir) {
  const std::filesystem::path rel =
      path.lexically_normal().lexically_relative(std::filesystem::path(dir).lexically_normal());
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
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
  // Traces belong to the run: a relative path is taken inside its folder.
  const std::filesystem::path trace(c.log.trace);
  if (!c.log.trace.empty() && trace.is_relative() && !lexically_inside(trace, c.run.dir))
    c.log.trace = (std::filesystem::path(c.run.dir) / trace).string();
  return c;
}

std::string plot_path(const LogConfig& log) {
  if (!log.plot.empty() || log.metrics.empty()) return log.plot;
  return std::filesystem::path(log.metrics).replace_extension(".png").string();
}

std::optional<std::string> resolve_layout(Layout& p, int world_size) {
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

Resolution resolve(RunConfig& c, const ResolveFacts& facts) {
  Resolution r;
  if (facts.tokenizer_vocab > 0) {
    if (c.model.vocab_size == 0) c.model.vocab_size = facts.tokenizer_vocab;
    KIRI_CHECK_KIND(kConfig, c.model.vocab_size >= facts.tokenizer_vocab,
                    "model.vocab_size = ", c.model.vocab_size, " is smaller than the ",
                    facts.tokenizer.empty() ? "" : facts.tokenizer + " ",
                    "tokenizer's vocabulary of ", facts.tokenizer_vocab);
  }
  if (facts.world > 0) {
    r.layout = resolve_layout(c.parallel, facts.world);
    if (facts.learning_rate) r.learning_rate = scale_learning_rate(c.train, global_batch(c));
  }
  return r;
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

LayoutFacts layout_facts(const RunConfig& c, int world) {
  LayoutFacts f;
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
  // The modules' names (and selective for them) before the offload I/O keys, as they were read.
  recompute_modules_of(c.parallel.activation_checkpointing, c.parallel.recompute_modules,
                       LayoutWords::kConfig);
  validate_layout(c.parallel, layout_facts(c, world), offload_spec(c.offload));
}

}  // namespace kiri
