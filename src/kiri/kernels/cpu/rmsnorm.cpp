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

template <typename T>
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     double eps) {
  const char* op = "rmsnorm_forward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_matrix<T>(out, N, C, op, "out");
  check_per_row<T>(rstd, N, op, "rstd");
  KIRI_CHECK(eps > 0, op, ": eps must be > 0, got ", eps);
  const T* x = inp.data<T>();     // [N, C]
  const T* w = weight.data<T>();  // [C]
  T* o = out.data<T>();           // [N, C]
  T* rs = rstd.data<T>();         // [N]
  const T inv_c = T(1) / static_cast<T>(C), teps = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * C;
    T* oi = o + i * C;
    T ss = 0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c) ss += xi[c] * xi[c];
    const T r = T(1) / std::sqrt(ss * inv_c + teps);
    // (x * rstd) * w: Hugging Face's order (normalise, then scale).
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) oi[c] = (xi[c] * r) * w[c];
    rs[i] = r;
  }
}

namespace {

// dinp[N, C] += rstd * (w*g - xhat * mean(w*g*xhat)), row by row.
template <typename T>
void rmsnorm_dinp(T* dx, const T* g, const T* x, const T* w, const T* rs, int64_t N, int64_t C) {
  const T inv_c = T(1) / static_cast<T>(C);
#pragma omp parallel for schedule(static) if (N * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* gi = g + i * C;
    const T* xi = x + i * C;
    T* dxi = dx + i * C;
    const T r = rs[i];
    T dot = 0;  // sum of w*g*xhat
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += w[c] * gi[c] * (xi[c] * r);
    const T m = dot * inv_c;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) dxi[c] += (w[c] * gi[c] - (xi[c] * r) * m) * r;
  }
}

}  // namespace

template <typename T>
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  const char* op = "rmsnorm_backward";
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  check_dtype<T>(inp, op, "inp");
  check_matrix<T>(dout, N, C, op, "dout");
  if (dinp.defined()) check_matrix<T>(dinp, N, C, op, "dinp");
  check_tensor<T>(weight, Shape{C}, op, "weight");
  check_tensor<T>(dweight, Shape{C}, op, "dweight");
  check_per_row<T>(rstd, N, op, "rstd");
  const T* g = dout.data<T>();   // [N, C]
  const T* x = inp.data<T>();    // [N, C]
  const T* rs = rstd.data<T>();  // [N]
  if (dinp.defined()) rmsnorm_dinp(dinp.data<T>(), g, x, weight.data<T>(), rs, N, C);
  // dweight[c] += sum_i g[i,c] * xhat[i,c], in double (as LayerNorm's)
  detail::add_column_sums(dweight.data<T>(), N, C, [&](int64_t i, int64_t c) {
    return g[i * C + c] * (x[i * C + c] * rs[i]);
  });
}

template void rmsnorm_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
template void rmsnorm_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
