#include "kiri/train/calibrate.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "kiri/base/timer.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::train {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

double measure_gemm_flops(int64_t n, int threads, int reps) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(std::max(1, threads));
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {
    Timer t;
    kernels::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (rep > 0) best = std::min(best, t.seconds());  // the first one warms up
  }
  omp_set_num_threads(saved);
  return 2.0 * static_cast<double>(n) * n * n / best;
}

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

}  // namespace kiri::train
