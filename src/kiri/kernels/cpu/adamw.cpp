// AdamW update and the sum of squares used for gradient-norm clipping.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels {

using detail::check_dtype;

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p) {
  const char* op = "adamw_update";
  check_dtype<float>(param, op, "param");
  check_dtype<float>(grad, op, "grad");
  check_dtype<float>(m, op, "m");
  check_dtype<float>(v, op, "v");
  const int64_t n = param.numel();
  KIRI_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, op, ": param ",
             param.shape().str(), ", grad ", grad.shape().str(), ", m ", m.shape().str(), ", v ",
             v.shape().str(), " must have the same number of elements");
  KIRI_CHECK(p.step >= 1, op, ": step ", p.step, " must be >= 1 (1-based)");
  float* w = param.data<float>();       // [n]
  const float* g = grad.data<float>();  // [n]
  float* mm = m.data<float>();          // [n]
  float* vv = v.data<float>();          // [n]
  // As PyTorch: p *= 1 - lr*wd; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, gs = p.grad_scale;
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * gs;
    const float mi = b1 * mm[i] + (1.0f - b1) * gi;
    const float vi = b2 * vv[i] + (1.0f - b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    w[i] = w[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
  }
}

namespace {

// Sum of squares of x[n] in double, in fixed chunks whose partial sums are
// added in order: the result does not depend on the thread count.
template <typename T>
double sum_of_squares_impl(const T* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));  // [chunks]
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * x[i];
    partial[c] = acc;
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  KIRI_CHECK(x.defined(), "sum_of_squares: tensor is undefined");
  if (x.dtype() == DType::kF32) return sum_of_squares_impl(x.data<float>(), x.numel());
  KIRI_CHECK(x.dtype() == DType::kF64, "sum_of_squares: tensor ", x.shape().str(), " is ",
             dtype_name(x.dtype()), ", expected F32 or F64");
  return sum_of_squares_impl(x.data<double>(), x.numel());
}

}  // namespace kiri::kernels
