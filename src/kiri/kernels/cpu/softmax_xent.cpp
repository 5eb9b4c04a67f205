// Fused softmax + cross-entropy over the vocabulary, one row per iteration. The one-pass
// kernel (softmax_xent_forward_backward) does the forward's and the backward's work on a row
// while it is in cache: a row of GPT-2's vocabulary is 196 KiB, and the [N, V] logits are the
// step's largest buffer, which the two-kernel pair reads from memory three times.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_per_row;
using detail::exp_fast;

namespace {

// Checks logits [N, V] (any leading shape) and targets, all of them here,
// before the parallel loop (which cannot throw). Returns {N, V}.
template <typename T>
std::pair<int64_t, int64_t> check_xent(const Tensor& logits, const Tensor& targets,
                                       const char* op) {
  check_dtype<T>(logits, op, "logits");
  const int64_t V = detail::last_dim(logits, op, "logits"), N = detail::rows_of(logits);
  KIRI_CHECK(V > 0, op, ": logits ", logits.shape().str(), " have an empty vocabulary");
  check_per_row<int32_t>(targets, N, op, "targets");
  const int32_t* t = targets.data<int32_t>();  // [N]
  for (int64_t i = 0; i < N; ++i)
    KIRI_CHECK(t[i] < V, op, ": target ", t[i], " at row ", i, " outside the vocabulary of ", V,
               " (logits ", logits.shape().str(), ")");
  return {N, V};
}

// log(sum_j exp(x[j])) with the max subtracted. Summed in float over blocks
// of kSumBlock (each vector lane adds ~64 terms), the block sums in double:
// one float sum over V ~ 50k terms would lose ~1e-5 relative, and a double
// accumulator in the vector loop measured 4x slower than this.
template <typename T>
T row_lse(const T* x, int64_t V) {
  constexpr int64_t kSumBlock = 1024;
  T m = x[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
  double sum = 0;
  for (int64_t b = 0; b < V; b += kSumBlock) {
    const int64_t e = std::min(V, b + kSumBlock);
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = b; j < e; ++j) s += exp_fast(x[j] - m);
    sum += static_cast<double>(s);
  }
  return m + static_cast<T>(std::log(sum));
}

// x[V] (a row's logits) overwritten with (softmax(x) - onehot(t)) * g, for lse l; 0 when the
// target is ignored (t < 0).
// Elementwise (no reduction), so its vector width does not change a bit of the result: 512-bit
// vectors where the CPU has them (GCC's default for -march=native on AVX-512 Xeons is 256).
// (The attribute is GCC's; clang has no such target string and warns, which -Werror fails.)
#if defined(__GNUC__) && !defined(__clang__)
#define KIRI_WIDE_VECTORS __attribute__((noinline, target("prefer-vector-width=512")))
#else
#define KIRI_WIDE_VECTORS __attribute__((noinline))
#endif
template <typename T>
KIRI_WIDE_VECTORS void row_dlogits(T* x, int64_t V, int32_t t, T l, T g) {
  if (t < 0) {
    std::fill(x, x + V, T(0));
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < V; ++j) x[j] = exp_fast(x[j] - l) * g;
  x[t] -= g;
}

}  // namespace

template <typename T>
void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits,
                          const Tensor& targets) {
  const char* op = "softmax_xent_forward";
  const auto [N, V] = check_xent<T>(logits, targets, op);
  check_per_row<T>(losses, N, op, "losses");
  check_per_row<T>(lse, N, op, "lse");
  const T* x = logits.data<T>();               // [N, V]
  const int32_t* t = targets.data<int32_t>();  // [N]
  T* loss = losses.data<T>();                  // [N]
  T* l = lse.data<T>();                        // [N]
#pragma omp parallel for schedule(static) if (N * V > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const T* xi = x + i * V;
    l[i] = row_lse(xi, V);
    loss[i] = t[i] < 0 ? T(0) : l[i] - xi[t[i]];
  }
}

template <typename T>
void softmax_xent_backward(Tensor& logits_to_dlogits, const Tensor& lse, const Tensor& targets,
                           const Tensor& dloss) {
  const char* op = "softmax_xent_backward";
  const auto [N, V] = check_xent<T>(logits_to_dlogits, targets, op);
  check_per_row<T>(lse, N, op, "lse");
  check_per_row<T>(dloss, N, op, "dloss");
  T* x = logits_to_dlogits.data<T>();          // [N, V] logits in, dlogits out
  const int32_t* t = targets.data<int32_t>();  // [N]
  const T* l = lse.data<T>();                  // [N]
  const T* dl = dloss.data<T>();               // [N]
#pragma omp parallel for schedule(static) if (N * V > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) row_dlogits(x + i * V, V, t[i], l[i], dl[i]);
}

template <typename T>
void softmax_xent_forward_backward(Tensor& losses, Tensor& lse, Tensor& logits, Tensor& dlogits,
                                   const Tensor& targets, const Tensor& dloss) {
  const char* op = "softmax_xent_forward_backward";
  const auto [N, V] = check_xent<T>(logits, targets, op);
  check_per_row<T>(losses, N, op, "losses");
  check_per_row<T>(lse, N, op, "lse");
  check_per_row<T>(dloss, N, op, "dloss");
  // dlogits: undefined (in place), or a 16-bit copy of float logits' shape.
  const DType dd = dlogits.defined() ? dlogits.dtype() : dtype_of<T>();
  KIRI_CHECK(
      !dlogits.defined() ||
          (std::is_same_v<T, float> && detail::is_lowp(dd) && dlogits.shape() == logits.shape()),
      op, ": dlogits must be undefined (in place) or BF16/F16 ", logits.shape().str(),
      " for F32 logits, got ", dtype_name(dd), " ", dlogits.defined() ? dlogits.shape().str() : "",
      " for ", dtype_name(logits.dtype()), " logits");
  T* x = logits.data<T>();  // [N, V] in, scratch
  auto* out = dlogits.defined() ? static_cast<uint16_t*>(dlogits.raw()) : nullptr;  // [N, V]
  const int32_t* t = targets.data<int32_t>();                                       // [N]
  T* loss = losses.data<T>();                                                       // [N]
  T* l = lse.data<T>();                                                             // [N]
  const T* dl = dloss.data<T>();                                                    // [N]
#pragma omp parallel for schedule(static) if (N * V > detail::kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    // The same operations as softmax_xent_forward then softmax_xent_backward (and convert).
    T* xi = x + i * V;
    l[i] = row_lse(xi, V);
    loss[i] = t[i] < 0 ? T(0) : l[i] - xi[t[i]];
    row_dlogits(xi, V, t[i], l[i], dl[i]);
    if constexpr (std::is_same_v<T, float>)
      if (out) detail::from_f32(out + i * V, dd, xi, V);
  }
}

template void softmax_xent_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_forward_backward<float>(Tensor&, Tensor&, Tensor&, Tensor&,
                                                   const Tensor&, const Tensor&);
template void softmax_xent_forward_backward<double>(Tensor&, Tensor&, Tensor&, Tensor&,
                                                    const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
