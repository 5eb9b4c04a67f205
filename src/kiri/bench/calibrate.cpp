#include "kiri/bench/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "kiri/base/best_of.h"
#include "kiri/base/stats.h"
#include "kiri/base/timer.h"
#include "kiri/bench/ddp_bench.h"
#include "kiri/comm/self.h"
#include "kiri/kernels/gemm_rate.h"
#include "kiri/kernels/ops.h"

namespace kiri::bench {

namespace {

// `n` OpenMP threads while alive (the non-GEMM measurements take one: a planner device is
// one core, a rank of one thread).
struct Threads {
  int saved = omp_get_max_threads();
  explicit Threads(int n) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved); }
};

}  // namespace

std::vector<TimedSize> measure_all_reduce(comm::Communicator& world,
                                          const std::vector<int64_t>& sizes, int reps) {
  Allocator allocator;
  std::vector<TimedSize> out;
  for (int64_t bytes : sizes) {
    Tensor t = Tensor::zeros({std::max<int64_t>(1, bytes / 4)}, DType::kF32, Category::kBuffers,
                             allocator);
    std::vector<double> times;
    world.barrier();
    for (int rep = 0; rep <= reps; ++rep) {
      Timer timer;
      world.all_reduce(t, comm::ReduceOp::kSum);
      if (rep > 0) times.push_back(timer.seconds());
    }
    out.push_back({static_cast<double>(t.numel() * 4), median(times)});
  }
  return out;
}

double measure_transfer_compute_share(comm::Communicator& world, int64_t bytes, int reps) {
  Threads one(1);
  Allocator allocator;
  Tensor t =
      Tensor::zeros({std::max<int64_t>(1, bytes / 4)}, DType::kF32, Category::kBuffers, allocator);
  constexpr int64_t n = 256;  // a piece of a layer's GEMM: 0.1-0.3 ms between polls
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  auto piece = [&] {
    kernels::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  std::vector<double> shares;
  for (int rep = 0; rep <= reps; ++rep) {
    // The loop alone for 0.1 s on every rank at once (the ranks may share cores).
    world.barrier();
    Timer loop;
    int64_t k_alone = 0;
    while (loop.seconds() < 0.1) {
      piece();
      ++k_alone;
    }
    const double rate_alone = static_cast<double>(k_alone) / loop.seconds();
    world.barrier();
    Timer with;
    int64_t k_with = 0;
    comm::WorkHandle w = world.all_reduce_async(t, comm::ReduceOp::kSum);
    while (!w->test()) {
      piece();
      ++k_with;
    }
    const double rate_with = static_cast<double>(k_with) / with.seconds();
    if (rep > 0) shares.push_back(std::clamp(1 - rate_with / rate_alone, 0.0, 1.0));
  }
  world.barrier();
  return median(shares);
}

std::vector<TimedSize> measure_memcpy(const std::vector<int64_t>& sizes, int reps) {
  std::vector<TimedSize> out;
  for (int64_t bytes : sizes) {
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    std::vector<double> times;
    for (int rep = 0; rep <= reps; ++rep) {
      src[rep % bytes] = static_cast<char>(rep);
      Timer timer;
      std::memcpy(dst.data(), src.data(), bytes);
      if (rep > 0) times.push_back(timer.seconds());
    }
    out.push_back({static_cast<double>(bytes), median(times)});
  }
  return out;
}

double measure_gemm_flops(int64_t n, int threads, int reps) {
  Threads use(std::max(1, threads));
  return kernels::measure_gemm_flops(n, reps);
}

double measure_gemm_bf16_flops(int64_t n, int threads, int reps) {
  Threads use(std::max(1, threads));
  return kernels::measure_gemm_bf16_flops(n, reps);
}

CorePeaks measure_core_peaks() {
  return {kernels::core_peak(DType::kF32), kernels::core_peak(DType::kBF16),
          kernels::core_peak(DType::kF16)};
}

namespace {

// The loss's tensors over [rows, vocab] fp32 logits, filled as a step fills them.
struct LossTensors {
  Allocator a;
  int64_t rows, vocab;
  Tensor logits, targets, losses, lse, dloss;
  LossTensors(int64_t r, int64_t v) : rows(r), vocab(v) {
    logits = Tensor::empty({rows, vocab}, DType::kF32, Category::kBuffers, a);
    targets = Tensor::empty({rows}, DType::kI32, Category::kBuffers, a);
    losses = Tensor::empty({rows}, DType::kF32, Category::kBuffers, a);
    lse = Tensor::empty({rows}, DType::kF32, Category::kBuffers, a);
    dloss = Tensor::empty({rows}, DType::kF32, Category::kBuffers, a);
    for (int64_t i = 0; i < rows; ++i) {
      targets.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % vocab);
      dloss.data<float>()[i] = 1.0f / static_cast<float>(rows);
    }
  }
  // The backward overwrites the logits in place: each repetition refills them, and the
  // refill, timed alone, is taken out.
  void fill() {
    float* x = logits.data<float>();
    for (int64_t i = 0; i < rows * vocab; ++i) x[i] = static_cast<float>(i % 97) * 0.01f;
  }
  template <typename Fn>
  double seconds_per_logit(int reps, Fn&& loss) {
    const double s = best_seconds(reps, [&] {
      fill();
      loss();
    });
    const double refill = best_seconds(reps, [&] { fill(); });
    return std::max(0.0, s - refill) / static_cast<double>(rows * vocab);
  }
};

}  // namespace

double measure_logit_seconds(int64_t rows, int64_t vocab, int reps) {
  Threads one(1);
  LossTensors t(rows, vocab);
  Tensor in_place;  // undefined: the gradient overwrites the logits, as an fp32 step's does
  return t.seconds_per_logit(reps, [&] {
    kernels::softmax_xent_forward_backward<float>(t.losses, t.lse, t.logits, in_place, t.targets,
                                                  t.dloss);
  });
}

double measure_split_logit_seconds(int64_t rows, int64_t vocab, int reps) {
  Threads one(1);
  LossTensors t(rows, vocab);
  Tensor sum = Tensor::empty({rows}, DType::kF64, Category::kBuffers, t.a);
  // One rank's slice that is the whole vocabulary: the kernels of
  // vocab_parallel_cross_entropy_forward and _backward, without their all-reduces.
  return t.seconds_per_logit(reps, [&] {
    kernels::vocab_slice_max_and_target(t.lse, t.losses, t.logits, t.targets, vocab, 0);
    kernels::vocab_slice_sum_exp(sum, t.logits, t.lse, vocab);
    kernels::vocab_slice_finish_loss(t.losses, t.lse, sum, t.targets);
    kernels::vocab_slice_xent_backward(t.logits, t.lse, t.targets, t.dloss, vocab, 0);
  });
}

double measure_optimizer_seconds(int64_t n, bool zero_grad, int reps) {
  Threads one(1);
  Allocator a;
  Tensor p = Tensor::zeros({n}, DType::kF32, Category::kParameters, a);
  Tensor g = Tensor::zeros({n}, DType::kF32, Category::kGradients, a);
  Tensor m = Tensor::zeros({n}, DType::kF32, Category::kOptimizerStates, a);
  Tensor v = Tensor::zeros({n}, DType::kF32, Category::kOptimizerStates, a);
  kernels::AdamWParams hp;
  hp.zero_grad = zero_grad;
  return best_seconds(reps, [&] { kernels::adamw_update(p, g, m, v, hp); }) /
         static_cast<double>(n);
}

double measure_gradient_seconds(int64_t n, int reps) {
  Threads one(1);
  Allocator a;
  Tensor g = Tensor::zeros({n}, DType::kF32, Category::kGradients, a);
  volatile double sink = 0;
  const double s = best_seconds(reps, [&] { sink = sink + kernels::sum_of_squares(g); });
  return s / static_cast<double>(n);
}

double measure_zeroing_seconds(int64_t n, int reps) {
  Threads one(1);
  Allocator a;
  Tensor g = Tensor::zeros({n}, DType::kF32, Category::kGradients, a);
  return best_seconds(reps, [&] { g.zero_(); }) / static_cast<double>(n);
}

double measure_step_seconds(const BenchSpec& spec) {
  Threads one(1);
  std::unique_ptr<comm::Communicator> self = comm::self_communicator();
  const ParallelStepTimes t = time_parallel_steps(*self, spec, {});
  return median(t.step_s);
}

}  // namespace kiri::bench
