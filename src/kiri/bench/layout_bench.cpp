#include "kiri/bench/layout_bench.h"

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/base/stats.h"
#include "kiri/base/timer.h"
#include "kiri/base/trace.h"
#include "kiri/bench/ddp_bench.h"
#include "kiri/optim/adamw.h"
#include "kiri/parallel/dims.h"
#include "kiri/parallel/pp/schedule.h"
#include "kiri/train/gemm_choice.h"
#include "kiri/train/step.h"

namespace kiri::bench {

namespace {

// What one run of a mesh layout measured on this rank.
struct MeshRun {
  std::vector<double> step_s;
  model::PipelineStats pipeline;  // summed over the timed steps
  double window_us = 0;           // the timed steps' windows, summed
  Tracer::BusyStats busy;         // summed over the windows
  std::map<std::string, double> op_us, group_us;
  int64_t peak_total = 0;
  std::array<int64_t, kNumCategories> peak_bytes{};  // this rank's allocator peak per category
  int stage = 0;                                     // this rank's pipeline stage ...
  bool stage_first = false;  // ... and whether it is the stage's first rank (dp 0, tp 0)
  std::vector<double> stage_step_compute_s;  // per round: this stage's compute per step
};

// Sets a tracer on a communicator for a scope and takes it off again.
class ScopedTracer {
 public:
  ScopedTracer(comm::Communicator& c, Tracer* t) : c_(c), before_(c.tracer()) { c.set_tracer(t); }
  ~ScopedTracer() { c_.set_tracer(before_); }
  ScopedTracer(const ScopedTracer&) = delete;
  ScopedTracer& operator=(const ScopedTracer&) = delete;

 private:
  comm::Communicator& c_;
  Tracer* before_;
};

// The length of the union of intervals (each [begin, end)).
double union_us(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  double total = 0;
  int64_t b = 0, e = 0;
  bool open = false;
  for (auto [s, f] : v) {
    if (open && s <= e) {
      e = std::max(e, f);
      continue;
    }
    if (open) total += double(e - b);
    b = s;
    e = f;
    open = true;
  }
  if (open) total += double(e - b);
  return total;
}

// The comm-lane spans of the trace, clipped to each window, per operation
// name and per "name group": the union of each one's spans, summed over the
// windows.
void comm_time_per_op(const Tracer& tracer, const std::vector<std::pair<int64_t, int64_t>>& windows,
                      MeshRun& out) {
  const nlohmann::json doc = nlohmann::json::parse(tracer.json());
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> by_op, by_group;
  for (const auto& ev : doc.at("traceEvents")) {
    if (ev.value("ph", "") != "X" || ev.value("tid", -1) != int(Tracer::Lane::kComm)) continue;
    const int64_t ts = ev.at("ts").get<int64_t>(), end = ts + ev.at("dur").get<int64_t>();
    const std::string name = ev.at("name").get<std::string>();
    std::string group = "?";
    if (ev.contains("args") && ev["args"].contains("group"))
      group = ev["args"]["group"].get<std::string>();
    for (auto [w0, w1] : windows) {
      const int64_t b = std::max(ts, w0), e = std::min(end, w1);
      if (b >= e) continue;
      by_op[name].push_back({b, e});
      by_group[name + " " + group].push_back({b, e});
    }
  }
  // Windows do not overlap, so a union over all of them is the sum of the
  // unions within each.
  for (auto& [k, v] : by_op) out.op_us[k] += union_us(std::move(v));
  for (auto& [k, v] : by_group) out.group_us[k] += union_us(std::move(v));
}

// The timed steps' windows: what the tracer saw the rank doing in them, and per operation.
void add_busy(const Tracer& tracer, const std::vector<std::pair<int64_t, int64_t>>& windows,
              MeshRun& out) {
  for (auto [w0, w1] : windows) {
    const Tracer::BusyStats b = tracer.busy(w0, w1);
    out.busy.compute_us += b.compute_us;
    out.busy.comm_us += b.comm_us;
    out.busy.idle_us += b.idle_us;
    out.busy.span_us += b.span_us;
    out.window_us += double(w1 - w0);
  }
  comm_time_per_op(tracer, windows, out);
}

// spec.warmup_steps + spec.steps full training steps of one mesh layout:
// the ParallelDims split from world, this rank's chunks (make_gpt_chunks), the
// ParallelGPT, AdamW, and micro_batch x m rows of random tokens per dp rank
// (the same on the tp and pp ranks of one dp index).
MeshRun time_mesh_steps(comm::Communicator& world, const BenchSpec& spec, const MeshLayout& l) {
  KIRI_CHECK_KIND(kConfig, l.shape.world() == world.size(), "layout ", l.name, ": ", l.shape.str(),
                  " needs ", l.shape.world(), " processes, not ", world.size());
  const model::PipelineOptions& po = l.options.pipeline;
  kiri::GPTConfig cfg = spec.model;
  if (l.vocab_size > 0) cfg.vocab_size = l.vocab_size;
  if (l.shape.pp > 1 || po.virtual_stages > 1)
    parallel::pp::validate_pipeline(po.schedule, static_cast<int>(cfg.n_layer), l.shape.pp,
                                    po.microbatches, po.virtual_stages);
  MeshRun out;
  world.barrier();
  Tracer tracer(world.rank());            // right after a barrier: the ranks' epochs agree
  tracer.set_enabled(false);              // the timed steps only
  ScopedTracer on_world(world, &tracer);  // split() passes it on to the ParallelDims' groups
  parallel::ParallelDims dims(world, l.shape);
  for (comm::Communicator* c : {&dims.dp(), &dims.tp(), &dims.pp()}) c->set_tracer(&tracer);
  Allocator alloc;
  std::vector<std::unique_ptr<model::GPT<float>>> owned =
      model::make_gpt_chunks(cfg, l.shape.pp, dims.pp_index(), po, spec.seq);
  std::vector<model::GPT<float>*> chunks;
  for (auto& c : owned) chunks.push_back(c.get());
  model::ParallelOptions options = l.options;
  options.sequence_parallel = l.sequence_parallel;
  model::ParallelGPT pm(chunks, dims, options, alloc);
  optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), kiri::AdamWConfig{}, alloc,
                   pm.norm_groups());
  opt.initialize(spec.init_seed);
  pm.synchronize_parameters();
  const int64_t rows = l.micro_batch * po.microbatches;
  Tensor x = Tensor::empty({rows, spec.seq}, DType::kI32, Category::kBuffers, alloc);
  Tensor y = Tensor::empty({rows, spec.seq}, DType::kI32, Category::kBuffers, alloc);
  Rng rng(spec.data_seed + static_cast<uint64_t>(dims.dp_index()));
  fill_random_tokens(rng, cfg.vocab_size, x, y);
  train::StepSettings settings;
  settings.lr = spec.lr;
  settings.loss_weight = 1.0 / double(rows * spec.seq * l.shape.dp);
  train::TrainingStep train_step(pm, opt, {.tracer = &tracer});
  nn::Context ctx{alloc};
  ctx.poll = pm.poller();
  model::Pipeline* pipeline = pm.pipeline();
  std::vector<std::pair<int64_t, int64_t>> windows;
  for (int s = 0; s < spec.warmup_steps + spec.steps; ++s) {
    const bool timed = s >= spec.warmup_steps;
    world.barrier();
    tracer.set_enabled(timed);
    const model::PipelineStats before = pipeline ? pipeline->stats() : model::PipelineStats{};
    const int64_t t0 = tracer.now_us();
    Timer t;
    {
      Tracer::Span step(&tracer, "step " + std::to_string(s + 1), "step", Tracer::Lane::kStep);
      train_step.run(ctx, x, y, settings);
    }
    const double st = t.seconds();
    const int64_t t1 = tracer.now_us();
    tracer.set_enabled(false);
    if (timed) {
      out.step_s.push_back(st);
      windows.push_back({t0, t1});
      if (pipeline) {
        const model::PipelineStats d = pipeline->stats() - before;
        out.pipeline.runs += d.runs;
        out.pipeline.window_s += d.window_s;
        out.pipeline.compute_s += d.compute_s;
      }
    }
  }
  add_busy(tracer, windows, out);
  out.peak_total = alloc.stats().peak_allocated;
  for (int c = 0; c < kNumCategories; ++c) out.peak_bytes[c] = alloc.stats().peak[c];
  out.stage = dims.pp_index();
  out.stage_first = dims.dp_index() == 0 && dims.tp_index() == 0;
  if (out.pipeline.runs > 0)
    out.stage_step_compute_s.push_back(out.pipeline.compute_s / double(out.step_s.size()));
  world.barrier();  // no rank tears its groups down while a peer still uses them
  return out;
}

}  // namespace

std::vector<LayoutBenchResult> run_layout_bench(
    comm::Communicator& world, const BenchSpec& spec,
    const std::vector<std::pair<std::string, model::ParallelOptions>>& layouts, int rounds) {
  KIRI_CHECK_KIND(kConfig, !layouts.empty(), "layout benchmark: no layouts");
  KIRI_CHECK_KIND(kConfig, rounds >= 1 && spec.steps >= 1,
                  "layout benchmark: rounds and steps must be >= 1 (got ", rounds, ", ", spec.steps,
                  ")");
  // kAuto's 16-bit GEMM path on this benchmark's own shapes, as kiri train chooses it.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    if (std::none_of(layouts.begin(), layouts.end(),
                     [dt](const auto& l) { return l.second.dtype == dt; }))
      continue;
    Allocator allocator;
    train::choose_gemm_lowp_path(
        world, dt, train::step_gemm_shapes(spec.model, spec.batch, spec.seq, 1), allocator);
  }
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
      out[i].sent_bytes = t.last_step_sent;  // the same every step and round
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
    for (int64_t b : r.sent_bytes) r.sent_bytes_total += b;
  }
  return out;
}

std::vector<MeshLayoutResult> run_mesh_layout_bench(comm::Communicator& world,
                                                    const BenchSpec& spec,
                                                    const std::vector<MeshLayout>& layouts,
                                                    int rounds) {
  KIRI_CHECK_KIND(kConfig, !layouts.empty(), "layout benchmark: no layouts");
  KIRI_CHECK_KIND(kConfig, rounds >= 1 && spec.steps >= 1,
                  "layout benchmark: rounds and steps must be >= 1 (got ", rounds, ", ", spec.steps,
                  ")");
  const size_t n = layouts.size();
  std::vector<MeshLayoutResult> out(n);
  std::vector<MeshRun> pooled(n);
  for (int round = 0; round < rounds; ++round) {
    for (size_t j = 0; j < n; ++j) {  // each round starts one layout later
      const size_t i = (j + static_cast<size_t>(round)) % n;
      MeshRun r = time_mesh_steps(world, spec, layouts[i]);
      MeshRun& p = pooled[i];
      p.step_s.insert(p.step_s.end(), r.step_s.begin(), r.step_s.end());
      p.pipeline.runs += r.pipeline.runs;
      p.pipeline.window_s += r.pipeline.window_s;
      p.pipeline.compute_s += r.pipeline.compute_s;
      p.window_us += r.window_us;
      p.busy.compute_us += r.busy.compute_us;
      p.busy.comm_us += r.busy.comm_us;
      p.busy.idle_us += r.busy.idle_us;
      p.busy.span_us += r.busy.span_us;
      for (auto& [k, v] : r.op_us) p.op_us[k] += v;
      for (auto& [k, v] : r.group_us) p.group_us[k] += v;
      p.peak_total = std::max(p.peak_total, r.peak_total);
      for (int c = 0; c < kNumCategories; ++c)
        p.peak_bytes[c] = std::max(p.peak_bytes[c], r.peak_bytes[c]);
      p.stage = r.stage;
      p.stage_first = r.stage_first;
      p.stage_step_compute_s.insert(p.stage_step_compute_s.end(), r.stage_step_compute_s.begin(),
                                    r.stage_step_compute_s.end());
    }
  }
  // Each stage's compute per step, from its first rank to everyone (collective, same order).
  Allocator alloc;
  std::vector<std::vector<double>> stage_compute(n);
  for (size_t i = 0; i < n; ++i) {
    const int pp = layouts[i].shape.pp;
    if (pp == 1) continue;
    Tensor t = Tensor::zeros({pp}, DType::kF64, Category::kBuffers, alloc);
    if (pooled[i].stage_first)
      t.data<double>()[pooled[i].stage] = median(pooled[i].stage_step_compute_s);
    world.all_reduce(t, comm::ReduceOp::kSum);
    stage_compute[i].assign(t.data<double>(), t.data<double>() + pp);
  }
  for (size_t i = 0; i < n; ++i) {
    const MeshLayout& l = layouts[i];
    const MeshRun& p = pooled[i];
    MeshLayoutResult& r = out[i];
    r.layout = l;
    r.tokens_per_step = l.shape.dp * l.micro_batch * l.options.pipeline.microbatches * spec.seq;
    r.timed_steps = static_cast<int>(p.step_s.size());
    r.step_s = median(p.step_s);
    r.tokens_per_s = double(r.tokens_per_step) / r.step_s;
    if (l.shape.pp > 1) {
      const int m = l.options.pipeline.microbatches, pp = l.shape.pp;
      r.bubble = p.pipeline.bubble();
      r.bubble_formula = double(pp - 1) / double(m * l.options.pipeline.virtual_stages + pp - 1);
      r.stage_compute_s = stage_compute[i];
      double sum = 0, most = 0;
      for (double c : r.stage_compute_s) {
        sum += c;
        most = std::max(most, c);
      }
      if (most > 0) r.bubble_unequal = 1.0 - r.stage_compute_s[0] / ((sum - most) / m + most);
    }
    const double span = p.busy.span_us > 0 ? p.busy.span_us : 1;
    r.compute_share = p.busy.compute_us / span;
    r.exposed_comm_share = p.busy.comm_us / span;
    r.idle_share = p.busy.idle_us / span;
    for (auto& [k, v] : p.op_us) r.comm_share_by_op[k] = v / span;
    for (auto& [k, v] : p.group_us) r.comm_share_by_group[k] = v / span;
    r.peak_total = p.peak_total;
    r.peak_bytes = p.peak_bytes;
  }
  return out;
}

}  // namespace kiri::bench
