// Linear layer in Hugging Face's Conv1D layout (weight [in, out]), on gemm.
#include <algorithm>
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels {

using detail::check_dtype;
using detail::check_matrix;
using detail::check_tensor;

template <typename T>
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  check_dtype<T>(weight, "linear_forward", "weight");
  KIRI_CHECK(weight.rank() == 2, "linear_forward: weight must be [in, out], got ",
             weight.shape().str());
  const int64_t IC = weight.dim(0), OC = weight.dim(1);
  const int64_t N = detail::rows_of(inp);
  check_matrix<T>(inp, N, IC, "linear_forward", "inp");
  check_matrix<T>(out, N, OC, "linear_forward", "out");
  if (bias.defined()) check_tensor<T>(bias, Shape{OC}, "linear_forward", "bias");
  T* o = out.data<T>();  // [N, OC]
  T beta = T(0);
  if (bias.defined() && N > 0) {
    // Start from the bias in every row and let the gemm accumulate on it.
    const T* b = bias.data<T>();  // [OC]
#pragma omp parallel for schedule(static) if (N * OC > detail::kMinParallelWork)
    for (int64_t i = 0; i < N; ++i) std::copy(b, b + OC, o + i * OC);
    beta = T(1);
  }
  gemm<T>(false, false, N, OC, IC, T(1), inp.data<T>(), IC, weight.data<T>(), OC, beta, o, OC);
}

namespace {

// dbias[OC] += column sums of dout[N, OC]. Parallel over blocks of columns,
// each summed over all rows in order (in double): deterministic whatever the
// thread count.
template <typename T>
void add_column_sums(T* dbias, const T* dout, int64_t N, int64_t OC) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * OC > detail::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, w = std::min(kBlock, OC - c0);
    double acc[kBlock] = {};  // [w]
    for (int64_t i = 0; i < N; ++i) {
      const T* row = dout + i * OC + c0;
      for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(row[j]);
    }
    for (int64_t j = 0; j < w; ++j) dbias[c0 + j] += static_cast<T>(acc[j]);
  }
}

}  // namespace

template <typename T>
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  check_dtype<T>(weight, "linear_backward", "weight");
  KIRI_CHECK(weight.rank() == 2, "linear_backward: weight must be [in, out], got ",
             weight.shape().str());
  const int64_t IC = weight.dim(0), OC = weight.dim(1);
  const int64_t N = detail::rows_of(inp);
  check_matrix<T>(inp, N, IC, "linear_backward", "inp");
  check_matrix<T>(dout, N, OC, "linear_backward", "dout");
  check_tensor<T>(dweight, weight.shape(), "linear_backward", "dweight");
  if (dinp.defined()) check_matrix<T>(dinp, N, IC, "linear_backward", "dinp");
  if (dbias.defined()) check_tensor<T>(dbias, Shape{OC}, "linear_backward", "dbias");
  const T* g = dout.data<T>();    // [N, OC]
  const T* x = inp.data<T>();     // [N, IC]
  const T* w = weight.data<T>();  // [IC, OC]
  // dinp[N, IC] += dout[N, OC] @ weight^T
  if (dinp.defined()) gemm<T>(false, true, N, IC, OC, T(1), g, OC, w, OC, T(1), dinp.data<T>(), IC);
  // dweight[IC, OC] += inp^T[IC, N] @ dout[N, OC]
  gemm<T>(true, false, IC, OC, N, T(1), x, IC, g, OC, T(1), dweight.data<T>(), OC);
  if (dbias.defined()) add_column_sums(dbias.data<T>(), g, N, OC);
}

template void linear_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&);
template void linear_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);

}  // namespace kiri::kernels
