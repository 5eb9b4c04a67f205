// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3).
// Evaluated as x * sigmoid(2u) (the same function: 0.5(1 + tanh u) =
// 1 / (1 + exp(-2u))), which avoids the cancellation in 1 + tanh(u) for
// negative x and needs a single exp.
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::exp_fast;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// exp(-2u), its argument clamped to [-80, 80] so that 1 / (1 + e) stays a
// normal float (no slow subnormals); past the clamp GELU is 0 or x to within
// 1e-34.
template <typename T>
inline T exp_minus_2u(T x) {
  T a = T(-2 * kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
  a = a < T(-80) ? T(-80) : a;
  a = a > T(80) ? T(80) : a;
  return exp_fast(a);
}

}  // namespace

template <typename T>
void gelu_forward(Tensor& out, const Tensor& inp) {
  check_dtype<T>(inp, "gelu_forward", "inp");
  detail::check_tensor<T>(out, inp.shape(), "gelu_forward", "out");
  const T* x = inp.data<T>();  // [n]
  T* o = out.data<T>();        // [n]
  const int64_t n = inp.numel();
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] / (T(1) + exp_minus_2u(x[i]));
}

template <typename T>
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_dtype<T>(inp, "gelu_backward", "inp");
  detail::check_tensor<T>(dinp, inp.shape(), "gelu_backward", "dinp");
  detail::check_tensor<T>(dout, inp.shape(), "gelu_backward", "dout");
  const T* x = inp.data<T>();   // [n]
  const T* g = dout.data<T>();  // [n]
  T* dx = dinp.data<T>();       // [n]
  const int64_t n = inp.numel();
  // With s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u):
  // d/dx = s + 2 x s (1 - s) u', 1 - s = e s, u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2).
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    const T e = exp_minus_2u(xi);
    const T s = T(1) / (T(1) + e);
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * xi * xi);
    // (2 x u') (e s) s: in this order no factor overflows for large |x|.
    dx[i] += g[i] * (s + T(2) * xi * du * (e * s) * s);
  }
}

template void gelu_forward<float>(Tensor&, const Tensor&);
template void gelu_forward<double>(Tensor&, const Tensor&);
template void gelu_backward<float>(Tensor&, const Tensor&, const Tensor&);
template void gelu_backward<double>(Tensor&, const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
