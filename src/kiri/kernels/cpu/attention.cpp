// Causal multi-head self-attention, one (batch, head) pair per OpenMP
// iteration. Inside the parallel loop each gemm runs single-threaded (oneDNN
// and OpenBLAS do so when called from a parallel region), on the strided head
// slices of qkv. Rows are processed in blocks of kRowBlock queries, each
// against keys [0, end of block): the causal triangle costs ~half a full
// T x T product, and a thread holds only a kRowBlock x T scores block.
// Backward recomputes the probabilities from q, k and the saved lse.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels {

using detail::check_dtype;
using detail::check_tensor;
using detail::exp_fast;

namespace {

constexpr int64_t kRowBlock = 64;

struct AttnDims {
  int64_t B, T, C, NH, hs;
};

// Per thread: scores/probabilities [rb, T], dP [rb, T] and D [T], rounded up
// to 64 bytes of floats so that every thread's slice is aligned alike (the
// vector loops' peeling, hence the rounding, then does not depend on which
// thread ran a head).
int64_t per_thread_numel(int64_t T) {
  const int64_t n = 2 * std::min(T, kRowBlock) * T + T;
  return (n + 15) / 16 * 16;
}

template <typename Tt>
AttnDims check_attention(const Tensor& qkv, const Tensor& lse, int n_head, const Tensor& scratch,
                         const char* op) {
  check_dtype<Tt>(qkv, op, "qkv");
  KIRI_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, op, ": qkv must be [B, T, 3C], got ",
             qkv.shape().str());
  AttnDims d{qkv.dim(0), qkv.dim(1), qkv.dim(2) / 3, n_head, 0};
  KIRI_CHECK(n_head > 0 && d.C % n_head == 0, op, ": n_head ", n_head, " does not divide C ", d.C,
             " of qkv ", qkv.shape().str());
  d.hs = d.C / n_head;
  check_tensor<Tt>(lse, Shape{d.B, d.NH, d.T}, op, "lse");
  check_dtype<Tt>(scratch, op, "scratch");
  const int threads = omp_get_max_threads();
  KIRI_CHECK(scratch.numel() >= attention_scratch_numel(d.T, threads), op, ": scratch ",
             scratch.shape().str(), " smaller than attention_scratch_numel(", d.T, ", ", threads,
             ") = ", attention_scratch_numel(d.T, threads));
  return d;
}

// Row softmax of scores s[n] over its first `valid` entries (the causal
// ones); the rest become exactly 0. Returns the log-sum-exp.
template <typename T>
T softmax_causal_row(T* s, int64_t valid, int64_t n) {
  T m = s[0];
#pragma omp simd reduction(max : m)
  for (int64_t j = 1; j < valid; ++j) m = s[j] > m ? s[j] : m;
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < valid; ++j) {
    s[j] = exp_fast(s[j] - m);
    sum += s[j];
  }
  const T inv = T(1) / sum;
#pragma omp simd
  for (int64_t j = 0; j < valid; ++j) s[j] *= inv;
  std::fill(s + valid, s + n, T(0));
  return m + std::log(sum);
}

// One (batch, head): q, k, v [T, hs] with row stride 3C, o [T, hs] with row
// stride C, lse [T]; S is the thread's scratch.
template <typename T>
void head_forward(const T* q, const T* k, const T* v, T* o, T* lse, T* S, const AttnDims& d) {
  const int64_t ld = 3 * d.C;
  const T scale = T(1) / std::sqrt(static_cast<T>(d.hs));
  for (int64_t r0 = 0; r0 < d.T; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.T, r0 + kRowBlock), rb = r1 - r0, n = r1;
    // S[rb, n] = scale * Q[r0:r1] @ K[0:n]^T
    gemm<T>(false, true, rb, n, d.hs, scale, q + r0 * ld, ld, k, ld, T(0), S, n);
    for (int64_t i = 0; i < rb; ++i) lse[r0 + i] = softmax_causal_row(S + i * n, r0 + i + 1, n);
    // O[r0:r1] = P[rb, n] @ V[0:n]
    gemm<T>(false, false, rb, d.hs, n, T(1), S, n, v, ld, T(0), o + r0 * d.C, d.C);
  }
}

// Runs fn(b, h, thread_scratch) for every pair in parallel. An exception
// cannot leave an OpenMP region, so the first one is carried out and rethrown.
template <typename T, typename Fn>
void for_each_head(const AttnDims& d, T* scratch, Fn fn) {
  const int64_t pairs = d.B * d.NH, slice = per_thread_numel(d.T);
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (pairs > 1 && \
                                              pairs * d.T * d.T * d.hs > detail::kMinParallelWork)
  for (int64_t bh = 0; bh < pairs; ++bh) {
    try {
      fn(bh / d.NH, bh % d.NH, scratch + omp_get_thread_num() * slice);
    } catch (...) {
#pragma omp critical(kiri_attention_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

int64_t attention_scratch_numel(int64_t T, int threads) {
  KIRI_CHECK(T >= 0 && threads >= 1, "attention_scratch_numel: T=", T, " threads=", threads);
  return threads * per_thread_numel(T);
}

template <typename T>
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, Tensor& scratch) {
  const AttnDims d = check_attention<T>(qkv, lse, n_head, scratch, "attention_forward");
  check_tensor<T>(out, Shape{d.B, d.T, d.C}, "attention_forward", "out");
  const T* x = qkv.data<T>();  // [B, T, 3C]
  T* o = out.data<T>();        // [B, T, C]
  T* l = lse.data<T>();        // [B, NH, T]
  for_each_head(d, scratch.data<T>(), [&](int64_t b, int64_t h, T* S) {
    const T* q = x + b * d.T * 3 * d.C + h * d.hs;
    head_forward(q, q + d.C, q + 2 * d.C, o + b * d.T * d.C + h * d.hs, l + (b * d.NH + h) * d.T, S,
                 d);
  });
}

namespace {

// Pointers of one (batch, head): inputs q, k, v (stride 3C), o and dout
// (stride C), lse [T]; gradients dq, dk, dv (stride 3C).
template <typename T>
struct HeadGrad {
  const T *q, *k, *v, *o, *dout, *lse;
  T *dq, *dk, *dv;
};

template <typename T>
void head_backward(const HeadGrad<T>& p, T* scratch, const AttnDims& d) {
  const int64_t ld = 3 * d.C, hs = d.hs, rbmax = std::min(d.T, kRowBlock);
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  T* P = scratch;                 // [rb, n] probabilities, recomputed
  T* dP = scratch + rbmax * d.T;  // [rb, n] dP, then dS in place
  T* D = dP + rbmax * d.T;        // [T] D_i = rowsum(dO_i * O_i)
  for (int64_t i = 0; i < d.T; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < hs; ++c) acc += p.dout[i * d.C + c] * p.o[i * d.C + c];
    D[i] = acc;
  }
  for (int64_t r0 = 0; r0 < d.T; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.T, r0 + kRowBlock), rb = r1 - r0, n = r1;
    const T* dO = p.dout + r0 * d.C;  // [rb, hs], stride C
    // P[rb, n] = exp(scale * Q K^T - lse), exactly 0 above the diagonal.
    gemm<T>(false, true, rb, n, hs, scale, p.q + r0 * ld, ld, p.k, ld, T(0), P, n);
    for (int64_t i = 0; i < rb; ++i) {
      T* row = P + i * n;
      const T li = p.lse[r0 + i];
      const int64_t valid = r0 + i + 1;
#pragma omp simd
      for (int64_t j = 0; j < valid; ++j) row[j] = exp_fast(row[j] - li);
      std::fill(row + valid, row + n, T(0));
    }
    // dV[0:n] += P^T @ dO;  dP[rb, n] = dO @ V[0:n]^T
    gemm<T>(true, false, n, hs, rb, T(1), P, n, dO, d.C, T(1), p.dv, ld);
    gemm<T>(false, true, rb, n, hs, T(1), dO, d.C, p.v, ld, T(0), dP, n);
    // dS = P * (dP - D_i), into dP (zero where P is).
    for (int64_t i = 0; i < rb; ++i) {
      const T Di = D[r0 + i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dP[i * n + j] = P[i * n + j] * (dP[i * n + j] - Di);
    }
    // dQ[r0:r1] += scale dS @ K[0:n];  dK[0:n] += scale dS^T @ Q[r0:r1]
    gemm<T>(false, false, rb, hs, n, scale, dP, n, p.k, ld, T(1), p.dq + r0 * ld, ld);
    gemm<T>(true, false, n, hs, rb, scale, dP, n, p.q + r0 * ld, ld, T(1), p.dk, ld);
  }
}

}  // namespace

template <typename T>
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Tensor& scratch) {
  const AttnDims d = check_attention<T>(qkv, lse, n_head, scratch, "attention_backward");
  check_tensor<T>(dqkv, qkv.shape(), "attention_backward", "dqkv");
  check_tensor<T>(out, Shape{d.B, d.T, d.C}, "attention_backward", "out");
  check_tensor<T>(dout, Shape{d.B, d.T, d.C}, "attention_backward", "dout");
  const T* x = qkv.data<T>();   // [B, T, 3C]
  const T* o = out.data<T>();   // [B, T, C]
  const T* g = dout.data<T>();  // [B, T, C]
  const T* l = lse.data<T>();   // [B, NH, T]
  T* dx = dqkv.data<T>();       // [B, T, 3C]
  for_each_head(d, scratch.data<T>(), [&](int64_t b, int64_t h, T* S) {
    const int64_t xoff = b * d.T * 3 * d.C + h * d.hs, ooff = b * d.T * d.C + h * d.hs;
    const HeadGrad<T> p{x + xoff,  x + xoff + d.C,  x + xoff + 2 * d.C,
                        o + ooff,  g + ooff,        l + (b * d.NH + h) * d.T,
                        dx + xoff, dx + xoff + d.C, dx + xoff + 2 * d.C};
    head_backward(p, S, d);
  });
}

template void attention_forward<float>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_forward<double>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, int, Tensor&);
template void attention_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, int, Tensor&);

}  // namespace kiri::kernels
