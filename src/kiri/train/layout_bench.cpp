#include "kiri/train/layout_bench.h"

#include <algorithm>

#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/optim/adamw.h"
#include "kiri/parallel/mesh.h"
#include "kiri/train/ddp_bench.h"

namespace kiri::train {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The bytes one step of a layout sends, as the dp communicator counts them.
// time_parallel_steps builds its mesh inside, so its communicators' counters
// are out of reach; this builds the same set-up and counts the second of two
// untimed steps (the first may do one-off work). With the default shard
// group (the whole dp group) every collective of the layout, the gradient
// norm's included, goes through mesh.dp().
void count_traffic(comm::Communicator& world, const BenchSpec& spec,
                   const model::ParallelOptions& options, LayoutBenchResult& r) {
  parallel::Mesh mesh(world, {world.size(), 1, 1});
  const double weight = 1.0 / double(spec.batch * spec.seq * world.size());
  Allocator alloc;
  model::GPT<float> model(spec.model);
  model::ParallelGPT pm(model, mesh, options, alloc);
  optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), optim::AdamWConfig{}, alloc,
                   pm.norm_groups());
  opt.initialize(1234);
  pm.synchronize_parameters();
  Tensor x = Tensor::empty({spec.batch, spec.seq}, DType::kI32, Category::kBuffers, alloc);
  Tensor y = Tensor::empty({spec.batch, spec.seq}, DType::kI32, Category::kBuffers, alloc);
  Rng rng(42 + static_cast<uint64_t>(world.rank()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(spec.model.vocab_size));
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(spec.model.vocab_size));
  }
  nn::Context ctx{alloc};
  ctx.poll = pm.poller();
  comm::Communicator& dp = mesh.dp();
  for (int s = 0; s < 2; ++s) {
    if (s == 1) dp.reset_stats();
    pm.zero_grad();
    pm.begin_micro_batch(true);
    model.forward(ctx, x, y, weight);
    model.backward(ctx);
    pm.end_micro_batch();
    opt.clip_and_step(3e-4);
    pm.after_optimizer_step();
  }
  // Traffic is booked when an operation starts, so nothing still in flight is missed.
  for (int k = 0; k < comm::kNumOpKinds; ++k) {
    r.sent_bytes[k] = dp.stats(static_cast<comm::OpKind>(k)).bytes_sent;
    r.sent_bytes_total += r.sent_bytes[k];
  }
}

}  // namespace

std::vector<LayoutBenchResult> run_layout_bench(
    comm::Communicator& world, const BenchSpec& spec,
    const std::vector<std::pair<std::string, model::ParallelOptions>>& layouts, int rounds) {
  KIRI_CHECK_KIND(kConfig, !layouts.empty(), "layout benchmark: no layouts");
  KIRI_CHECK_KIND(kConfig, rounds >= 1 && spec.steps >= 1,
                  "layout benchmark: rounds and steps must be >= 1 (got ", rounds, ", ", spec.steps,
                  ")");
  const size_t n = layouts.size();
  std::vector<LayoutBenchResult> out(n);
  std::vector<std::vector<double>> pooled(n);
  for (int round = 0; round < rounds; ++round) {
    // Each round starts one layout later, so that no layout always runs
    // first (cold caches) or right after the same neighbour.
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % n;
      ParallelStepTimes t = time_parallel_steps(world, spec, layouts[i].second);
      pooled[i].insert(pooled[i].end(), t.step_s.begin(), t.step_s.end());
      for (int c = 0; c < kNumCategories; ++c)
        out[i].peak_bytes[c] = std::max(out[i].peak_bytes[c], t.peak.peak[c]);
      out[i].peak_total = std::max(out[i].peak_total, t.peak.peak_allocated);
    }
  }
  const double tokens = double(spec.batch * spec.seq * world.size());
  for (size_t i = 0; i < n; ++i) {
    LayoutBenchResult& r = out[i];
    r.name = layouts[i].first;
    r.options = layouts[i].second;
    r.timed_steps = static_cast<int>(pooled[i].size());
    r.step_s = median(pooled[i]);
    r.tokens_per_s = tokens / r.step_s;
    r.ratio = r.step_s / median(pooled[0]);
    if (world.size() > 1) count_traffic(world, spec, r.options, r);
  }
  return out;
}

}  // namespace kiri::train
