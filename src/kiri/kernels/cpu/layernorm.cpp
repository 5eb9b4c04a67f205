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

namespace {}  // namespace

template <typename T>
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm_forward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(bias, Shape{C}, op, "bias");
  check_matrix<T>(out, N, C, op, "out");
  check_per_row<T>(mean, N, op, "mean");
  check_per_row<T>(rstd, N, op, "rstd");
  const T* x = inp.data<T>();     // [N, C]
  const T* w = weight.data<T>();  // [C]
  const T* b = bias.data<T>();    // [C]
  T* o = out.data<T>();           // [N, C]
  T* mu = mean.data<T>();         // [N]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    T* oi = o + i * C;
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
    mu[i] = m;
    rs[i] = r;
  }
}

namespace {

// dinp[N, C] += (w*g - mean(w*g) - xhat * mean(w*g*xhat)) * rstd, row by row.
template <typename T>
void layernorm_dinp(T* dx, const T* g, const T* x, const T* w, const T* mu, const T* rs, int64_t N,
                    int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gi = g + i * C;
    const T* xi = x + i * C;
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
#pragma omp simd
    for (int64_t c = 0; c < C; ++c)
      dxi[c] += (w[c] * gi[c] - dnorm_mean - (xi[c] - m) * r * dnorm_norm_mean) * r;
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

}  // namespace

template <typename T>
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  const char* op = "layernorm_backward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_matrix<T>(dout, N, C, op, "dout");
  if (dinp.defined()) check_matrix<T>(dinp, N, C, op, "dinp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(dweight, Shape{C}, op, "dweight");
  check_tensor<T>(dbias, Shape{C}, op, "dbias");
  check_per_row<T>(mean, N, op, "mean");
  check_per_row<T>(rstd, N, op, "rstd");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* mu = mean.data<T>();  // [N]
  const T* rs = rstd.data<T>();  // [N]
  if (dinp.defined()) layernorm_dinp(dinp.data<T>(), g, x, weight.data<T>(), mu, rs, N, C);
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

}  // namespace kiri::kernels::cpu
