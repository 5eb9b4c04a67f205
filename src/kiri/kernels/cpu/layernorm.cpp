// LayerNorm over the last dimension, biased variance as PyTorch.
#include <algorithm>
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

// One row of LayerNorm: oi, *mu and *rs from xi. layernorm_forward and residual_layernorm_forward
// both run it, so the fused kernel computes every float as the unfused pair does.
template <typename T>
inline void layernorm_row(T* oi, T* mu, T* rs, const T* xi, const T* w, const T* b, int64_t C,
                          T inv_c, T teps) {
  // Two passes (mean, then squared deviations): no cancellation in float.
  T m = 0;
#pragma omp simd reduction(+ : m)
  for (int64_t c = 0; c < C; ++c) m += xi[c];
  m *= inv_c;
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t c = 0; c < C; ++c) v += (xi[c] - m) * (xi[c] - m);
  v *= inv_c;
  const T r = T(1) / std::sqrt(v + teps);
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) oi[c] = (xi[c] - m) * r * w[c] + b[c];
  *mu = m;
  *rs = r;
}

// The checks of both forwards: out [N, C] for inp's rows, weight and bias [C], mean and rstd [N].
template <typename T>
void check_forward(const char* op, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                   const Tensor& inp, const Tensor& weight, const Tensor& bias, int64_t N,
                   int64_t C) {
  check_dtype<T>(inp, op, "inp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(bias, Shape{C}, op, "bias");
  check_matrix<T>(out, N, C, op, "out");
  check_per_row<T>(mean, N, op, "mean");
  check_per_row<T>(rstd, N, op, "rstd");
}

}  // namespace

template <typename T>
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_forward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_forward<T>(op, out, mean, rstd, inp, weight, bias, N, C);
  const T* x = inp.data<T>();     // [N, C]
  const T* w = weight.data<T>();  // [C]
  const T* b = bias.data<T>();    // [C]
  T* o = out.data<T>();           // [N, C]
  T* mu = mean.data<T>();         // [N]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i)
    layernorm_row(o + i * C, mu + i, rs + i, x + i * C, w, b, C, inv_c, teps);
}

template <typename T>
void residual_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& weight,
                                const Tensor& bias, double eps) {
  const char* op = "residual_layernorm_forward";
  const int64_t C = detail::last_dim(a, op, "a"), N = detail::rows_of(a);
  check_dtype<T>(a, op, "a");
  check_tensor<T>(b, a.shape(), op, "b");
  check_tensor<T>(sum, a.shape(), op, "sum");
  check_forward<T>(op, out, mean, rstd, a, weight, bias, N, C);
  const T* x = a.data<T>();       // [N, C]
  const T* y = b.data<T>();       // [N, C]
  const T* w = weight.data<T>();  // [C]
  const T* bb = bias.data<T>();   // [C]
  T* s = sum.data<T>();           // [N, C]
  T* o = out.data<T>();           // [N, C]
  T* mu = mean.data<T>();         // [N]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    const T* yi = y + i * C;
    T* si = s + i * C;
    // residual_forward's add; the row stays in L1 for the norm's three passes.
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) si[c] = xi[c] + yi[c];
    layernorm_row(o + i * C, mu + i, rs + i, si, w, bb, C, inv_c, teps);
  }
}

namespace {

// dx[N, C] = base + (w*g - mean(w*g) - xhat * mean(w*g*xhat)) * rstd (+ skip where given), row by
// row. base == dx is layernorm_backward's `dinp +=`; the skip is the residual's gradient added
// after it, as residual_forward(dx, dx, skip) does (the same two roundings, in that order).
template <typename T>
void layernorm_dinp(T* dx, const T* base, const T* skip, const T* g, const T* x, const T* w,
                    const T* mu, const T* rs, int64_t N, int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gi = g + i * C;
    const T* xi = x + i * C;
    const T* bi = base + i * C;
    T* dxi = dx + i * C;
    const T m = mu[i], r = rs[i];
    T dnorm_mean = 0, dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int64_t c = 0; c < C; ++c) {
      const T dn = w[c] * gi[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (xi[c] - m) * r;
    }
    dnorm_mean *= inv_c;
    dnorm_norm_mean *= inv_c;
    if (skip == nullptr) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c)
        dxi[c] = bi[c] + (w[c] * gi[c] - dnorm_mean - (xi[c] - m) * r * dnorm_norm_mean) * r;
    } else {
      const T* ki = skip + i * C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c)
        dxi[c] =
            (bi[c] + (w[c] * gi[c] - dnorm_mean - (xi[c] - m) * r * dnorm_norm_mean) * r) + ki[c];
    }
  }
}

// dweight[c] += sum_i g[i,c] * xhat[i,c]; dbias[c] += sum_i g[i,c]. Parallel
// over column blocks, rows summed in order in double: deterministic for any
// thread count.
template <typename T>
void layernorm_dparams(T* dw, T* db, const T* g, const T* x, const T* mu, const T* rs, int64_t N,
                       int64_t C) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, width = std::min(kBlock, C - c0);
    double acc_w[kBlock] = {};  // [width]
    double acc_b[kBlock] = {};  // [width]
    for (int64_t i = 0; i < N; ++i) {
      const T* gi = g + i * C + c0;
      const T* xi = x + i * C + c0;
      const T m = mu[i], r = rs[i];
      for (int64_t j = 0; j < width; ++j) {
        acc_w[j] += static_cast<double>(gi[j] * ((xi[j] - m) * r));
        acc_b[j] += static_cast<double>(gi[j]);
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dw[c0 + j] += static_cast<T>(acc_w[j]);
      db[c0 + j] += static_cast<T>(acc_b[j]);
    }
  }
}

// The checks of both backwards; dinp is checked by the caller.
template <typename T>
void check_backward(const char* op, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                    const Tensor& inp, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd) {
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_matrix<T>(dout, N, C, op, "dout");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(dweight, Shape{C}, op, "dweight");
  check_tensor<T>(dbias, Shape{C}, op, "dbias");
  check_per_row<T>(mean, N, op, "mean");
  check_per_row<T>(rstd, N, op, "rstd");
}

}  // namespace

template <typename T>
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  check_backward<T>(op, dweight, dbias, dout, inp, weight, mean, rstd);
  const int64_t C = inp.dim(inp.rank() - 1), N = detail::rows_of(inp);
  if (dinp.defined()) check_matrix<T>(dinp, N, C, op, "dinp");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* mu = mean.data<T>();  // [N]
  const T* rs = rstd.data<T>();  // [N]
  if (dinp.defined()) {
    T* dx = dinp.data<T>();
    layernorm_dinp<T>(dx, dx, nullptr, g, x, weight.data<T>(), mu, rs, N, C);
  }
  layernorm_dparams(dweight.data<T>(), dbias.data<T>(), g, x, mu, rs, N, C);
}

template <typename T>
void layernorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                                 Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd) {
  const char* op = "layernorm_backward_residual";
  check_backward<T>(op, dweight, dbias, dout, inp, weight, mean, rstd);
  const int64_t C = inp.dim(inp.rank() - 1), N = detail::rows_of(inp);
  check_matrix<T>(dinp, N, C, op, "dinp");
  check_matrix<T>(dbase, N, C, op, "dbase");
  if (dskip.defined()) check_matrix<T>(dskip, N, C, op, "dskip");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* mu = mean.data<T>();  // [N]
  const T* rs = rstd.data<T>();  // [N]
  layernorm_dinp<T>(dinp.data<T>(), dbase.data<T>(), dskip.defined() ? dskip.data<T>() : nullptr, g,
                    x, weight.data<T>(), mu, rs, N, C);
  layernorm_dparams(dweight.data<T>(), dbias.data<T>(), g, x, mu, rs, N, C);
}

template void layernorm_forward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, double);
template void layernorm_forward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, double);
template void layernorm_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&);
template void layernorm_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, const Tensor&);
#define KIRI_RESIDUAL_LAYERNORM(T)                                                               \
  template void residual_layernorm_forward<T>(Tensor&, Tensor&, Tensor&, Tensor&, const Tensor&, \
                                              const Tensor&, const Tensor&, const Tensor&,       \
                                              double);                                           \
  template void layernorm_backward_residual<T>(Tensor&, const Tensor&, const Tensor&, Tensor&,   \
                                               Tensor&, const Tensor&, const Tensor&,            \
                                               const Tensor&, const Tensor&, const Tensor&);
KIRI_RESIDUAL_LAYERNORM(float)
KIRI_RESIDUAL_LAYERNORM(double)
#undef KIRI_RESIDUAL_LAYERNORM

}  // namespace kiri::kernels::cpu
