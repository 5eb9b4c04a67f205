// Linear layers on gemm: Hugging Face's Conv1D layout (weight [in, out], GPT-2's)
// and nn.Linear's (weight [out, in], no bias: Llama's).
#include <algorithm>
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
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

namespace {

// The shapes shared by the mixed-precision pair: weight [IC,OC] BF16 or F16,
// inp [N,IC] of the same dtype; returns {N, IC, OC}.
struct LinearDims {
  int64_t N, IC, OC;
};
// out_in: the weight is [OC, IC] (nn.Linear's layout).
LinearDims check_linear_lowp(const Tensor& inp, const Tensor& weight, const char* op,
                             bool out_in = false) {
  KIRI_CHECK(weight.defined() && detail::is_lowp(weight.dtype()) && weight.rank() == 2, op,
             ": weight must be ", out_in ? "[out, in]" : "[in, out]", " BF16 or F16, got ",
             weight.defined() ? weight.shape().str() : "undefined", " ",
             weight.defined() ? dtype_name(weight.dtype()) : "");
  const LinearDims d{detail::rows_of(inp), weight.dim(out_in ? 1 : 0), weight.dim(out_in ? 0 : 1)};
  KIRI_CHECK(inp.defined() && inp.dtype() == weight.dtype(), op, ": inp must be ",
             dtype_name(weight.dtype()), " like the weight");
  KIRI_CHECK(detail::last_dim(inp, op, "inp") == d.IC, op, ": inp ", inp.shape().str(),
             " does not fit weight ", weight.shape().str());
  return d;
}

void check_lowp_like(const Tensor& t, const Tensor& weight, const Shape& shape, const char* op,
                     const char* name) {
  KIRI_CHECK(t.defined() && t.dtype() == weight.dtype() && t.shape() == shape, op, ": ", name,
             " must be ", dtype_name(weight.dtype()), " ", shape.str(), ", got ",
             t.defined() ? dtype_name(t.dtype()) : "undefined", " ",
             t.defined() ? t.shape().str() : "");
}

}  // namespace

void linear_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear_forward_lowp";
  const auto [N, IC, OC] = check_linear_lowp(inp, weight, op);
  check_matrix<float>(out, N, OC, op, "out");
  if (bias.defined()) check_lowp_like(bias, weight, Shape{OC}, op, "bias");
  float* o = out.data<float>();  // [N, OC]
  float beta = 0.0f;
  if (bias.defined() && N > 0) {
    // Every row starts from the bias (widened once); the gemm adds on top.
    detail::to_f32(o, bias.raw(), bias.dtype(), OC);
#pragma omp parallel for schedule(static) if (N * OC > detail::kMinParallelWork)
    for (int64_t i = 1; i < N; ++i) std::copy(o, o + OC, o + i * OC);
    beta = 1.0f;
  }
  gemm_lowp(weight.dtype(), false, false, N, OC, IC, 1.0f, inp.raw(), IC, weight.raw(), OC, beta, o,
            DType::kF32, OC);
}

void linear_backward_lowp(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, Allocator& scratch) {
  const char* op = "linear_backward_lowp";
  const auto [N, IC, OC] = check_linear_lowp(inp, weight, op);
  check_matrix<float>(dout, N, OC, op, "dout");
  check_lowp_like(dweight, weight, weight.shape(), op, "dweight");
  if (dinp.defined()) check_matrix<float>(dinp, N, IC, op, "dinp");
  if (dbias.defined()) check_lowp_like(dbias, weight, Shape{OC}, op, "dbias");
  const DType dt = weight.dtype();
  // dout rounded once, shared by both GEMMs.
  Tensor g = Tensor::empty(Shape{N, OC}, dt, Category::kBuffers, scratch);  // [N, OC]
  convert(g, dout);
  // dinp[N, IC] += dout[N, OC] @ weight^T
  if (dinp.defined())
    gemm_lowp(dt, false, true, N, IC, OC, 1.0f, g.raw(), OC, weight.raw(), OC, 1.0f,
              dinp.data<float>(), DType::kF32, IC);
  // dweight[IC, OC] += inp^T[IC, N] @ dout[N, OC], rounded once
  gemm_lowp(dt, true, false, IC, OC, N, 1.0f, inp.raw(), IC, g.raw(), OC, 1.0f, dweight.raw(), dt,
            OC);
  if (dbias.defined()) {
    // Column sums of the fp32 dout (as the fp32 layer computes them), then rounded in.
    Tensor sums = Tensor::zeros(Shape{OC}, DType::kF32, Category::kBuffers, scratch);  // [OC]
    add_column_sums(sums.data<float>(), dout.data<float>(), N, OC);
    add_into(dbias, sums);
  }
}

// nn.Linear's layout: weight [OC, IC], no bias (Llama's projections).
template <typename T>
void linear_nt_forward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  check_dtype<T>(weight, "linear_nt_forward", "weight");
  KIRI_CHECK(weight.rank() == 2, "linear_nt_forward: weight must be [out, in], got ",
             weight.shape().str());
  const int64_t OC = weight.dim(0), IC = weight.dim(1), N = detail::rows_of(inp);
  check_matrix<T>(inp, N, IC, "linear_nt_forward", "inp");
  check_matrix<T>(out, N, OC, "linear_nt_forward", "out");
  // out[N, OC] = inp[N, IC] @ weight[OC, IC]^T
  gemm<T>(false, true, N, OC, IC, T(1), inp.data<T>(), IC, weight.data<T>(), IC, T(0),
          out.data<T>(), OC);
}

template <typename T>
void linear_nt_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight) {
  check_dtype<T>(weight, "linear_nt_backward", "weight");
  KIRI_CHECK(weight.rank() == 2, "linear_nt_backward: weight must be [out, in], got ",
             weight.shape().str());
  const int64_t OC = weight.dim(0), IC = weight.dim(1), N = detail::rows_of(inp);
  check_matrix<T>(inp, N, IC, "linear_nt_backward", "inp");
  check_matrix<T>(dout, N, OC, "linear_nt_backward", "dout");
  check_tensor<T>(dweight, weight.shape(), "linear_nt_backward", "dweight");
  if (dinp.defined()) check_matrix<T>(dinp, N, IC, "linear_nt_backward", "dinp");
  const T* g = dout.data<T>();  // [N, OC]
  // dinp[N, IC] += dout[N, OC] @ weight[OC, IC]
  if (dinp.defined())
    gemm<T>(false, false, N, IC, OC, T(1), g, OC, weight.data<T>(), IC, T(1), dinp.data<T>(), IC);
  // dweight[OC, IC] += dout^T[OC, N] @ inp[N, IC]
  gemm<T>(true, false, OC, IC, N, T(1), g, OC, inp.data<T>(), IC, T(1), dweight.data<T>(), IC);
}

void linear_nt_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight) {
  const char* op = "linear_nt_forward_lowp";
  const auto [N, IC, OC] = check_linear_lowp(inp, weight, op, true);
  check_matrix<float>(out, N, OC, op, "out");
  gemm_lowp(weight.dtype(), false, true, N, OC, IC, 1.0f, inp.raw(), IC, weight.raw(), IC, 0.0f,
            out.data<float>(), DType::kF32, OC);
}

void linear_nt_backward_lowp(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, Allocator& scratch) {
  const char* op = "linear_nt_backward_lowp";
  const auto [N, IC, OC] = check_linear_lowp(inp, weight, op, true);
  check_matrix<float>(dout, N, OC, op, "dout");
  check_lowp_like(dweight, weight, weight.shape(), op, "dweight");
  if (dinp.defined()) check_matrix<float>(dinp, N, IC, op, "dinp");
  const DType dt = weight.dtype();
  // dout rounded once, shared by both GEMMs.
  Tensor g = Tensor::empty(Shape{N, OC}, dt, Category::kBuffers, scratch);  // [N, OC]
  convert(g, dout);
  // dinp[N, IC] += dout[N, OC] @ weight[OC, IC]
  if (dinp.defined())
    gemm_lowp(dt, false, false, N, IC, OC, 1.0f, g.raw(), OC, weight.raw(), IC, 1.0f,
              dinp.data<float>(), DType::kF32, IC);
  // dweight[OC, IC] += dout^T[OC, N] @ inp[N, IC], rounded once
  gemm_lowp(dt, true, false, OC, IC, N, 1.0f, g.raw(), OC, inp.raw(), IC, 1.0f, dweight.raw(), dt,
            IC);
}

template void linear_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&);
template void linear_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);

template void linear_nt_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void linear_nt_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void linear_nt_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&);
template void linear_nt_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&);

}  // namespace kiri::kernels
