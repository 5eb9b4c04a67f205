// Linear layers on gemm: Hugging Face's Conv1D layout (weight [in, out], GPT-2's)
// and nn.Linear's (weight [out, in], no bias: Llama's). Both layouts run the same
// three products, the weight's transposes and leading dimension following its layout:
//   forward   out[N,OC]  = inp @ W             | inp @ W^T
//   dinp      dinp[N,IC] += dout @ W^T         | dout @ W
//   dweight   dW[IC,OC]  += inp^T @ dout       | dW[OC,IC] += dout^T @ inp
#include <algorithm>
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_matrix;
using detail::check_tensor;

namespace {

struct LinearDims {
  int64_t N, IC, OC;
};

// gemm<T> with beta, for T's tensors (the C dtype is T's).
template <typename T>
struct TypedGemm {
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                  const void* B, int64_t ldb, double beta, void* C, DType, int64_t ldc) const {
    gemm<T>(ta, tb, M, N, K, T(1), static_cast<const T*>(A), lda, static_cast<const T*>(B), ldb,
            T(beta), static_cast<T*>(C), ldc);
  }
};
// gemm_lowp on 16-bit A and B of dtype ab; C of the given dtype.
struct LowpGemm {
  DType ab;
  void operator()(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
                  const void* B, int64_t ldb, double beta, void* C, DType c_dtype,
                  int64_t ldc) const {
    gemm_lowp(ab, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, static_cast<float>(beta), C, c_dtype, ldc);
  }
};

// out[N, OC] = beta * out + inp @ W (W^T when out_in)
template <typename G>
void product_out(const G& gemm, bool out_in, const LinearDims& d, const void* x, const void* w,
                 double beta, void* out) {
  gemm(false, out_in, d.N, d.OC, d.IC, x, d.IC, w, out_in ? d.IC : d.OC, beta, out, DType::kF32,
       d.OC);
}
// dinp[N, IC] += dout @ W^T (W when out_in); dinp is T's (fp32 on the 16-bit path)
template <typename G>
void product_dinp(const G& gemm, bool out_in, const LinearDims& d, const void* g, const void* w,
                  void* dinp) {
  gemm(false, !out_in, d.N, d.IC, d.OC, g, d.OC, w, out_in ? d.IC : d.OC, 1.0, dinp, DType::kF32,
       d.IC);
}
// dW[IC, OC] += inp^T @ dout, or dW[OC, IC] += dout^T @ inp when out_in; dW of dtype wd
template <typename G>
void product_dweight(const G& gemm, bool out_in, const LinearDims& d, const void* x, const void* g,
                     void* dw, DType wd) {
  if (out_in)
    gemm(true, false, d.OC, d.IC, d.N, g, d.OC, x, d.IC, 1.0, dw, wd, d.IC);
  else
    gemm(true, false, d.IC, d.OC, d.N, x, d.IC, g, d.OC, 1.0, dw, wd, d.OC);
}

// The weight's [IC, OC] (or [OC, IC]) and the rows of inp, checked for T.
template <typename T>
LinearDims check_linear(const Tensor& inp, const Tensor& weight, bool out_in, const char* op) {
  check_dtype<T>(weight, op, "weight");
  KIRI_CHECK(weight.rank() == 2, op, ": weight must be ", out_in ? "[out, in]" : "[in, out]",
             ", got ", weight.shape().str());
  const LinearDims d{detail::rows_of(inp), weight.dim(out_in ? 1 : 0), weight.dim(out_in ? 0 : 1)};
  check_matrix<T>(inp, d.N, d.IC, op, "inp");
  return d;
}

template <typename T>
void forward_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                  bool out_in, const char* op) {
  const LinearDims d = check_linear<T>(inp, weight, out_in, op);
  check_matrix<T>(out, d.N, d.OC, op, "out");
  if (bias.defined()) check_tensor<T>(bias, Shape{d.OC}, op, "bias");
  T* o = out.data<T>();  // [N, OC]
  double beta = 0;
  if (bias.defined() && d.N > 0) {
    // Start from the bias in every row and let the gemm accumulate on it.
    const T* b = bias.data<T>();  // [OC]
#pragma omp parallel for schedule(static) if (d.N * d.OC > detail::kMinParallelWork)
    for (int64_t i = 0; i < d.N; ++i) std::copy(b, b + d.OC, o + i * d.OC);
    beta = 1;
  }
  product_out(TypedGemm<T>{}, out_in, d, inp.raw(), weight.raw(), beta, o);
}

template <typename T>
void backward_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                   const Tensor& inp, const Tensor& weight, bool out_in, const char* op) {
  const LinearDims d = check_linear<T>(inp, weight, out_in, op);
  check_matrix<T>(dout, d.N, d.OC, op, "dout");
  check_tensor<T>(dweight, weight.shape(), op, "dweight");
  if (dinp.defined()) check_matrix<T>(dinp, d.N, d.IC, op, "dinp");
  if (dbias.defined()) check_tensor<T>(dbias, Shape{d.OC}, op, "dbias");
  const TypedGemm<T> gemm;
  const T* g = dout.data<T>();  // [N, OC]
  if (dinp.defined()) product_dinp(gemm, out_in, d, g, weight.raw(), dinp.raw());
  product_dweight(gemm, out_in, d, inp.raw(), g, dweight.raw(), dweight.dtype());
  const int64_t OC = d.OC;
  if (dbias.defined())
    detail::add_column_sums(dbias.data<T>(), d.N, OC,
                            [&](int64_t i, int64_t c) { return g[i * OC + c]; });
}

// The mixed-precision pair: weight BF16 or F16, inp [N,IC] of the same dtype.
LinearDims check_linear_lowp(const Tensor& inp, const Tensor& weight, bool out_in, const char* op) {
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

void forward_lowp_impl(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias,
                       bool out_in, const char* op) {
  const LinearDims d = check_linear_lowp(inp, weight, out_in, op);
  check_matrix<float>(out, d.N, d.OC, op, "out");
  if (bias.defined()) check_lowp_like(bias, weight, Shape{d.OC}, op, "bias");
  float* o = out.data<float>();  // [N, OC]
  double beta = 0;
  if (bias.defined() && d.N > 0) {
    // Every row starts from the bias (widened once); the gemm adds on top.
    detail::to_f32(o, bias.raw(), bias.dtype(), d.OC);
#pragma omp parallel for schedule(static) if (d.N * d.OC > detail::kMinParallelWork)
    for (int64_t i = 1; i < d.N; ++i) std::copy(o, o + d.OC, o + i * d.OC);
    beta = 1;
  }
  product_out(LowpGemm{weight.dtype()}, out_in, d, inp.raw(), weight.raw(), beta, o);
}

void backward_lowp_impl(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, Allocator& scratch, bool out_in,
                        const char* op) {
  const LinearDims d = check_linear_lowp(inp, weight, out_in, op);
  const DType dt = weight.dtype();
  // A dout already in the weights' dtype (rounded by a fused kernel before) is used as it is;
  // the bias gradient needs the fp32 one.
  const bool rounded = dout.defined() && dout.dtype() == dt;
  if (rounded) {
    check_lowp_like(dout, weight, Shape{d.N, d.OC}, op, "dout");
    KIRI_CHECK(!dbias.defined(), op, ": a ", dtype_name(dt),
               " dout leaves the bias gradient to its caller (it sums the fp32 one)");
  } else {
    check_matrix<float>(dout, d.N, d.OC, op, "dout");
  }
  check_lowp_like(dweight, weight, weight.shape(), op, "dweight");
  if (dinp.defined()) check_matrix<float>(dinp, d.N, d.IC, op, "dinp");
  if (dbias.defined()) check_lowp_like(dbias, weight, Shape{d.OC}, op, "dbias");
  const LowpGemm gemm{dt};
  // dout rounded once, shared by both GEMMs.
  Tensor g = dout;  // [N, OC]
  if (!rounded) {
    g = Tensor::empty(Shape{d.N, d.OC}, dt, Category::kBuffers, scratch);
    convert(g, dout);
  }
  if (dinp.defined()) product_dinp(gemm, out_in, d, g.raw(), weight.raw(), dinp.raw());
  product_dweight(gemm, out_in, d, inp.raw(), g.raw(), dweight.raw(), dt);  // rounded once
  if (dbias.defined()) {
    // Column sums of the fp32 dout (as the fp32 layer computes them), then rounded in.
    Tensor sums = Tensor::zeros(Shape{d.OC}, DType::kF32, Category::kBuffers, scratch);  // [OC]
    const float* gd = dout.data<float>();
    const int64_t OC = d.OC;
    detail::add_column_sums(sums.data<float>(), d.N, OC,
                            [&](int64_t i, int64_t c) { return gd[i * OC + c]; });
    add_into(dbias, sums);
  }
}

}  // namespace

template <typename T>
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  forward_impl<T>(out, inp, weight, bias, false, "linear_forward");
}

template <typename T>
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  backward_impl<T>(dinp, dweight, dbias, dout, inp, weight, false, "linear_backward");
}

void linear_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  forward_lowp_impl(out, inp, weight, bias, false, "linear_forward_lowp");
}

void linear_backward_lowp(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, Allocator& scratch) {
  backward_lowp_impl(dinp, dweight, dbias, dout, inp, weight, scratch, false,
                     "linear_backward_lowp");
}

template <typename T>
void linear_nt_forward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  forward_impl<T>(out, inp, weight, Tensor(), true, "linear_nt_forward");
}

template <typename T>
void linear_nt_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight) {
  Tensor no_bias;
  backward_impl<T>(dinp, dweight, no_bias, dout, inp, weight, true, "linear_nt_backward");
}

void linear_nt_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight) {
  forward_lowp_impl(out, inp, weight, Tensor(), true, "linear_nt_forward_lowp");
}

void linear_nt_backward_lowp(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, Allocator& scratch) {
  Tensor no_bias;
  backward_lowp_impl(dinp, dweight, no_bias, dout, inp, weight, scratch, true,
                     "linear_nt_backward_lowp");
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

}  // namespace kiri::kernels::cpu
