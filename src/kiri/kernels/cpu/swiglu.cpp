// SwiGLU, Llama's MLP gate: out = silu(gate) * up, silu(g) = g * sigmoid(g).
// The sigmoid as 1 / (1 + exp(-g)) with the vectorising exp (vmath.h), which
// clamps its argument so the quotient stays a normal float: 0 or 1 beyond it.
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_tensor;
using detail::exp_fast;

template <typename T>
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu_forward";
  check_dtype<T>(gate, op, "gate");
  check_tensor<T>(up, gate.shape(), op, "up");
  check_tensor<T>(out, gate.shape(), op, "out");
  const T* g = gate.data<T>();  // [n]
  const T* u = up.data<T>();    // [n]
  T* o = out.data<T>();         // [n]
  const int64_t n = gate.numel();
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (T(1) + exp_fast(-g[i])) * u[i];
}

template <typename T>
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& gate, const Tensor& up,
                     const Tensor& dout) {
  const char* op = "swiglu_backward";
  check_dtype<T>(gate, op, "gate");
  check_tensor<T>(up, gate.shape(), op, "up");
  check_tensor<T>(dout, gate.shape(), op, "dout");
  check_tensor<T>(dgate, gate.shape(), op, "dgate");
  check_tensor<T>(dup, gate.shape(), op, "dup");
  const T* g = gate.data<T>();  // [n]
  const T* u = up.data<T>();    // [n]
  const T* d = dout.data<T>();  // [n]
  T* dg = dgate.data<T>();      // [n]
  T* du = dup.data<T>();        // [n]
  const int64_t n = gate.numel();
  // silu'(g) = s (1 + g (1 - s)), s = sigmoid(g).
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const T s = T(1) / (T(1) + exp_fast(-g[i]));
    du[i] += d[i] * (g[i] * s);
    dg[i] += d[i] * u[i] * (s * (T(1) + g[i] * (T(1) - s)));
  }
}

template void swiglu_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void swiglu_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void swiglu_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void swiglu_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);

}  // namespace kiri::kernels::cpu
