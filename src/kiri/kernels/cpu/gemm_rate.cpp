#include "kiri/kernels/cpu/gemm_rate.h"

#include <algorithm>
#include <vector>

#include "kiri/base/best_of.h"
#include "kiri/base/timer.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

double measure_gemm_flops(int64_t n, int reps) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double best = best_seconds(reps, [&] {
    gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * static_cast<double>(n) * n * n / best;
}

double measure_gemm_bf16_flops(int64_t n, int reps) {
  // bf16 0.5 and 0.25 (the high halves of the fp32 values).
  std::vector<uint16_t> a(n * n, 0x3F00), b(n * n, 0x3E80);
  std::vector<float> c(n * n);
  const double best = best_seconds(reps, [&] {
    gemm_lowp(DType::kBF16, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
              DType::kF32, n);
  });
  return 2.0 * static_cast<double>(n) * n * n / best;
}

}  // namespace kiri::kernels::cpu
