#include "kiri/bench/bench.h"

#include <omp.h>

#include <memory>
#include <vector>

#include "kiri/base/best_of.h"
#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/base/stats.h"
#include "kiri/base/timer.h"
#include "kiri/bench/step_gemms.h"
#include "kiri/comm/self.h"
#include "kiri/kernels/bandwidth.h"
#include "kiri/kernels/ops.h"
#include "kiri/kernels/peak.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/gemm_choice.h"
#include "kiri/train/metrics.h"
#include "kiri/train/step.h"

namespace kiri::bench {

namespace {

kiri::GPTConfig llama_shape(int layers, int heads, int kv_heads, int embd, int ffn, int vocab,
                            bool tied) {
  kiri::GPTConfig c{layers, heads, embd, vocab, 1024};
  c.arch = kiri::Arch::kLlama;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = ffn;
  c.tie_word_embeddings = tied;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-5;
  return c;
}

}  // namespace

BenchSpec bench_preset(const std::string& name) {
  BenchSpec s;
  s.name = name;
  if (name == "tiny") {
    s.model = {4, 4, 256, 50257, 1024};
    s.batch = 8;
    s.seq = 128;
  } else if (name == "gpt2-124M") {
    s.model = {12, 12, 768, 50257, 1024};
    s.batch = 4;
    s.seq = 64;
  } else if (name == "tiny-llama") {
    // tiny's size as a Llama: 4 x 256, 4 query heads over 2 key/value heads, SwiGLU of width
    // 688 (8h/3 rounded up to 16: the MLP's parameters of tiny's 4h GELU MLP), Llama 2's
    // 32000-token vocabulary with an untied head.
    s.model = llama_shape(4, 4, 2, 256, 688, 32000, false);
    s.batch = 8;
    s.seq = 128;
  } else if (name == "smollm-135M") {
    // HuggingFaceTB/SmolLM-135M's config.json: 30 x 576, 9 heads over 3, SwiGLU 1536, the
    // 49152-token vocabulary tied; T and B as gpt2-124M's.
    s.model = llama_shape(30, 9, 3, 576, 1536, 49152, true);
    s.batch = 4;
    s.seq = 64;
  } else {
    KIRI_RAISE(kConfig, "unknown benchmark config '", name,
               "' (known: tiny, gpt2-124M, tiny-llama, smollm-135M)");
  }
  return s;
}

void fill_random_tokens(Rng& rng, int64_t vocab_size, Tensor& inputs, Tensor& targets) {
  int32_t* x = inputs.data<int32_t>();
  int32_t* y = targets.data<int32_t>();
  for (int64_t i = 0; i < inputs.numel(); ++i) {
    x[i] = static_cast<int32_t>(rng.below(vocab_size));
    y[i] = static_cast<int32_t>(rng.below(vocab_size));
  }
}

int64_t adamw_bytes_per_element(DType dtype, bool zero_grad) {
  const int64_t g = static_cast<int64_t>(dtype_size(dtype));
  // param (or master), m, v: read and written; the gradient read (and written when zeroed);
  // 16-bit values written.
  return 3 * 2 * 4 + g + (zero_grad ? g : 0) + (dtype == DType::kF32 ? 0 : g);
}

double measure_adamw_bandwidth(int64_t n, DType dtype, bool zero_grad, int threads, int repeats) {
  KIRI_CHECK_KIND(kConfig, n >= 1 && threads >= 1, "measure_adamw_bandwidth: n ", n,
                  " and threads ", threads, " must be >= 1");
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
  Allocator a;
  const bool lowp = dtype != DType::kF32;
  Tensor p = Tensor::empty({n}, DType::kF32, Category::kOptimizerStates, a);  // [n]
  Tensor g = Tensor::empty({n}, dtype, Category::kGradients, a);              // [n]
  Tensor m = Tensor::empty({n}, DType::kF32, Category::kOptimizerStates, a);  // [n]
  Tensor v = Tensor::empty({n}, DType::kF32, Category::kOptimizerStates, a);  // [n]
  Tensor w;  // [n] of dtype, 16-bit only
  if (lowp) w = Tensor::empty({n}, dtype, Category::kParameters, a);
  // Normal numbers throughout (no denormals to slow the arithmetic): the pages are
  // touched here first, as training touches them before its first update.
  p.fill_(0.02);
  g.fill_(1e-3);
  m.fill_(1e-4);
  v.fill_(1e-6);
  kernels::AdamWParams hp;
  hp.weight_decay = 0.1f;
  hp.zero_grad = zero_grad;
  const double s = best_seconds(repeats, [&] {
    kernels::adamw_update(p, g, m, v, hp, lowp ? &w : nullptr);
    ++hp.step;
  });
  omp_set_num_threads(saved_threads);
  return static_cast<double>(adamw_bytes_per_element(dtype, zero_grad) * n) / s;
}

MemoryRates measure_memory_rates(int64_t n, DType dtype, int threads, int64_t array_bytes,
                                 int rounds) {
  KIRI_CHECK_KIND(kConfig, rounds >= 1, "measure_memory_rates: rounds must be >= 1, got ", rounds);
  MemoryRates r;
  for (int round = 0; round < rounds; ++round) {
    r.memory = std::max(r.memory, kernels::measure_memory_bandwidth(threads, array_bytes, 3));
    r.adamw = std::max(r.adamw, measure_adamw_bandwidth(n, dtype, true, threads, 3));
  }
  return r;
}

BenchResult run_training_bench(const BenchSpec& spec) {
  KIRI_CHECK_KIND(
      kConfig, spec.dtype == DType::kF32 || spec.dtype == DType::kBF16 || spec.dtype == DType::kF16,
      "kiri bench: dtype must be fp32, bf16 or fp16, got ", dtype_name(spec.dtype));
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(spec.threads);
  BenchResult r;
  r.spec = spec;
  {
    // One process: the 1x1x1 layout, stage 0 (no communication).
    std::unique_ptr<comm::Communicator> self = comm::self_communicator();
    parallel::ParallelDims dims(*self, {1, 1, 1});
    Allocator allocator;
    if (spec.dtype != DType::kF32)  // kAuto's 16-bit path on this step's shapes, as kiri train
      train::choose_gemm_lowp_path(*self, spec.dtype,
                                   train::step_gemm_shapes(spec.model, spec.batch, spec.seq, 1),
                                   allocator);
    model::GPT<float> model(spec.model);
    model::ParallelOptions options;
    options.dtype = spec.dtype;  // 16-bit: mixed precision, as kiri bench --dtypes
    model::ParallelGPT pm(model, dims, options, allocator);
    optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), kiri::AdamWConfig{},
                     allocator, pm.norm_groups());
    opt.initialize(spec.init_seed);
    pm.synchronize_parameters();
    train::TrainingStep step(pm, opt);
    Tensor x = Tensor::empty({spec.batch, spec.seq}, DType::kI32, Category::kBuffers, allocator);
    Tensor y = Tensor::empty({spec.batch, spec.seq}, DType::kI32, Category::kBuffers, allocator);
    Rng rng(spec.data_seed);
    nn::Context ctx{allocator};
    ctx.poll = pm.poller();
    train::StepSettings settings;
    settings.lr = spec.lr;
    settings.loss_weight = 1.0 / double(x.numel());
    // The step's GEMMs alone on the paths the step takes, replayed once after every step: a
    // busy spell of a shared machine then falls on a step and its replay alike.
    StepGemmReplay replay(spec.model, spec.batch, spec.seq, spec.dtype);
    std::vector<double> times, gemm_times, ratios, optimizer;
    for (int s = 0; s < spec.warmup_steps + spec.steps; ++s) {
      fill_random_tokens(rng, spec.model.vocab_size, x, y);  // outside the timed step
      Timer timer;
      const train::StepOutcome out = step.run(ctx, x, y, settings);
      const double step_s = timer.seconds();
      const double gemm_s = replay.run();
      if (s >= spec.warmup_steps) {
        times.push_back(step_s);
        gemm_times.push_back(gemm_s);
        ratios.push_back(step_s / gemm_s);
        optimizer.push_back(out.optimizer_s);
      }
      const double loss = out.loss_sum * settings.loss_weight;
      if (s == 0) r.loss_first = loss;
      r.loss_last = loss;
    }
    r.step_s = median(times);
    r.optimizer_s = median(optimizer);
    r.gemm_step_s = median(gemm_times);
    r.step_over_gemms = median(ratios);
  }
  r.tokens_per_s = double(spec.batch * spec.seq) / r.step_s;
  if (spec.dtype != DType::kF32) r.gemm_lowp = kernels::gemm_lowp_path_description(spec.dtype);
  r.gemm_flops = train::measure_gemm_flops_rate();
  if (spec.peak_flops > 0) {
    r.peak_flops = spec.peak_flops;
    r.peak_instruction = "given";
  } else {
    r.peak_flops = kernels::peak_flops(spec.dtype, spec.threads);
    r.peak_instruction = kernels::core_peak(spec.dtype).instruction;
  }
  const double model_flops_per_s = spec.model.flops_per_token(spec.seq) * r.tokens_per_s;
  r.mfu = train::model_flops_utilization(model_flops_per_s, r.peak_flops);
  r.mfu_gemm = train::model_flops_utilization(model_flops_per_s, r.gemm_flops);
  const MemoryRates rates =
      measure_memory_rates(spec.model.num_parameters(), spec.dtype, spec.threads);
  r.memory_bandwidth = rates.memory;
  r.adamw_bandwidth = rates.adamw;
  omp_set_num_threads(saved_threads);
  return r;
}

}  // namespace kiri::bench
