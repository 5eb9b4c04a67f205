// Residual connection: out = a + b; the gradient flows to both unchanged.
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_tensor;

template <typename T>
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  check_dtype<T>(a, "residual_forward", "a");
  check_tensor<T>(b, a.shape(), "residual_forward", "b");
  check_tensor<T>(out, a.shape(), "residual_forward", "out");
  const T* x = a.data<T>();  // [n]
  const T* y = b.data<T>();  // [n]
  T* o = out.data<T>();      // [n]
  const int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

namespace {

// d[n] += g[n]
template <typename T>
void accumulate(T* d, const T* g, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) d[i] += g[i];
}

}  // namespace

// da or db may be undefined when that input needs no gradient.
template <typename T>
void residual_backward(Tensor& da, Tensor& db, const Tensor& dout) {
  check_dtype<T>(dout, "residual_backward", "dout");
  const T* g = dout.data<T>();  // [n]
  if (da.defined()) {
    check_tensor<T>(da, dout.shape(), "residual_backward", "da");
    accumulate(da.data<T>(), g, dout.numel());
  }
  if (db.defined()) {
    check_tensor<T>(db, dout.shape(), "residual_backward", "db");
    accumulate(db.data<T>(), g, dout.numel());
  }
}

template void residual_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void residual_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void residual_backward<float>(Tensor&, Tensor&, const Tensor&);
template void residual_backward<double>(Tensor&, Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
