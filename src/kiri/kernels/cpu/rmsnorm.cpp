// RMSNorm over the last dimension (Llama's): no mean subtracted, no bias. The
// row statistic is computed in T (fp32 in training, as Hugging Face's
// LlamaRMSNorm computes it in fp32 whatever the model's dtype).
#include <cmath>
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_matrix;
using detail::check_per_row;
using detail::check_tensor;

namespace {

// One row of RMSNorm: oi and *rs from xi. rmsnorm_forward and residual_rmsnorm_forward both run
// it, so the fused kernel computes every float as the unfused pair does.
template <typename T>
inline void rmsnorm_row(T* oi, T* rs, const T* xi, const T* w, int64_t C, T inv_c, T teps) {
  T ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t c = 0; c < C; ++c) ss += xi[c] * xi[c];
  const T r = T(1) / std::sqrt(ss * inv_c + teps);
  // (x * rstd) * w: Hugging Face's order (normalise, then scale).
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) oi[c] = (xi[c] * r) * w[c];
  *rs = r;
}

// The checks of both forwards: out [N, C] for inp's rows, weight [C], rstd [N], eps > 0.
template <typename T>
void check_forward(const char* op, const Tensor& out, const Tensor& rstd, const Tensor& inp,
                   const Tensor& weight, double eps, int64_t N, int64_t C) {
  check_dtype<T>(inp, op, "inp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_matrix<T>(out, N, C, op, "out");
  check_per_row<T>(rstd, N, op, "rstd");
  KIRI_CHECK(eps > 0, op, ": eps must be > 0, got ", eps);
}

}  // namespace

template <typename T>
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     double eps) {
  const char* op = "rmsnorm_forward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_forward<T>(op, out, rstd, inp, weight, eps, N, C);
  const T* x = inp.data<T>();     // [N, C]
  const T* w = weight.data<T>();  // [C]
  T* o = out.data<T>();           // [N, C]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) rmsnorm_row(o + i * C, rs + i, x + i * C, w, C, inv_c, teps);
}

template <typename T>
void residual_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& weight, double eps) {
  const char* op = "residual_rmsnorm_forward";
  const int64_t C = detail::last_dim(a, op, "a"), N = detail::rows_of(a);
  check_dtype<T>(a, op, "a");
  check_tensor<T>(b, a.shape(), op, "b");
  check_tensor<T>(sum, a.shape(), op, "sum");
  check_forward<T>(op, out, rstd, a, weight, eps, N, C);
  const T* x = a.data<T>();       // [N, C]
  const T* y = b.data<T>();       // [N, C]
  const T* w = weight.data<T>();  // [C]
  T* s = sum.data<T>();           // [N, C]
  T* o = out.data<T>();           // [N, C]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    const T* yi = y + i * C;
    T* si = s + i * C;
    // residual_forward's add; the row stays in L1 for the norm's two passes.
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) si[c] = xi[c] + yi[c];
    rmsnorm_row(o + i * C, rs + i, si, w, C, inv_c, teps);
  }
}

namespace {

// dx[N, C] = base + rstd * (w*g - xhat * mean(w*g*xhat)) (+ skip where given), row by row.
// base == dx is rmsnorm_backward's `dinp +=`; the skip is the residual's gradient added after
// it, as residual_forward(dx, dx, skip) does (the same two roundings, in that order).
template <typename T>
void rmsnorm_dinp(T* dx, const T* base, const T* skip, const T* g, const T* x, const T* w,
                  const T* rs, int64_t N, int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gi = g + i * C;
    const T* xi = x + i * C;
    const T* bi = base + i * C;
    T* dxi = dx + i * C;
    const T r = rs[i];
    T dot = 0;  // sum of w*g*xhat
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += w[c] * gi[c] * (xi[c] * r);
    const T m = dot * inv_c;
    if (skip == nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dxi[c] = bi[c] + (w[c] * gi[c] - (xi[c] * r) * m) * r;
    } else {
      const T* ki = skip + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c)
        dxi[c] = (bi[c] + (w[c] * gi[c] - (xi[c] * r) * m) * r) + ki[c];
    }
  }
}

// The checks of both backwards; dinp is checked by the caller.
template <typename T>
void check_backward(const char* op, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                    const Tensor& weight, const Tensor& rstd) {
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_matrix<T>(dout, N, C, op, "dout");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(dweight, Shape{C}, op, "dweight");
  check_per_row<T>(rstd, N, op, "rstd");
}

// dweight[c] += sum_i g[i,c] * xhat[i,c], in double (as LayerNorm's)
template <typename T>
void rmsnorm_dweight(T* dw, const T* g, const T* x, const T* rs, int64_t N, int64_t C) {
  detail::add_column_sums(
      dw, N, C, [&](int64_t i, int64_t c) { return g[i * C + c] * (x[i * C + c] * rs[i]); });
}

}  // namespace

template <typename T>
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  check_backward<T>(op, dweight, dout, inp, weight, rstd);
  const int64_t C = inp.dim(inp.rank() - 1), N = detail::rows_of(inp);
  if (dinp.defined()) check_matrix<T>(dinp, N, C, op, "dinp");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* rs = rstd.data<T>();  // [N]
  if (dinp.defined()) {
    T* dx = dinp.data<T>();
    rmsnorm_dinp<T>(dx, dx, nullptr, g, x, weight.data<T>(), rs, N, C);
  }
  rmsnorm_dweight(dweight.data<T>(), g, x, rs, N, C);
}

template <typename T>
void rmsnorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                               Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward_residual";
  check_backward<T>(op, dweight, dout, inp, weight, rstd);
  const int64_t C = inp.dim(inp.rank() - 1), N = detail::rows_of(inp);
  check_matrix<T>(dinp, N, C, op, "dinp");
  check_matrix<T>(dbase, N, C, op, "dbase");
  if (dskip.defined()) check_matrix<T>(dskip, N, C, op, "dskip");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* rs = rstd.data<T>();  // [N]
  rmsnorm_dinp<T>(dinp.data<T>(), dbase.data<T>(), dskip.defined() ? dskip.data<T>() : nullptr, g,
                  x, weight.data<T>(), rs, N, C);
  rmsnorm_dweight(dweight.data<T>(), g, x, rs, N, C);
}

template void rmsnorm_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
template void rmsnorm_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&);
#define KIRI_RESIDUAL_RMSNORM(T)                                                             \
  template void residual_rmsnorm_forward<T>(Tensor&, Tensor&, Tensor&, const Tensor&,        \
                                            const Tensor&, const Tensor&, double);           \
  template void rmsnorm_backward_residual<T>(Tensor&, const Tensor&, const Tensor&, Tensor&, \
                                             const Tensor&, const Tensor&, const Tensor&,    \
                                             const Tensor&);
KIRI_RESIDUAL_RMSNORM(float)
KIRI_RESIDUAL_RMSNORM(double)
#undef KIRI_RESIDUAL_RMSNORM

}  // namespace kiri::kernels::cpu
