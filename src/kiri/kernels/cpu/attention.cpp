// Causal self-attention, multi-head (GPT-2's fused q|k|v) and grouped-query
// (Llama's separate q, k, v), one (batch, head) pair per OpenMP iteration
// (backward: one (batch, key/value head) pair, its query heads in turn, so that
// their dk and dv sums need no atomics). Inside the parallel loop each gemm runs single-threaded
// (oneDNN and OpenBLAS do so when called from a parallel region), on the strided head slices of
// qkv. Rows are processed in blocks of kRowBlock queries, each against keys [0, end of block): the
// causal triangle costs ~half a full T x T product, and a thread holds only a kRowBlock x T scores
// block. Backward recomputes the probabilities from q, k and the saved lse.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_tensor;
using detail::exp_fast;

namespace {

constexpr int64_t kRowBlock = 64;

// NH query heads and NKV key/value heads of hs columns; the row strides of q
// (and dq), k (dk), v (dv), and of o and dout.
struct AttnDims {
  int64_t B, T, NH, NKV, hs;
  int64_t ldq, ldk, ldv, ldo;
  int64_t group() const { return NH / NKV; }
};

// The tensors of one call: q, k, v, o, dout, lse and the gradients dq, dk, dv
// (null in forward).
template <typename T>
struct AttnPtrs {
  const T *q, *k, *v, *o, *dout, *lse;
  T *out, *lse_out, *dq, *dk, *dv;
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
void check_scratch(const Tensor& scratch, int64_t T, const char* op) {
  check_dtype<Tt>(scratch, op, "scratch");
  const int threads = omp_get_max_threads();
  KIRI_CHECK(scratch.numel() >= attention_scratch_numel(T, threads), op, ": scratch ",
             scratch.shape().str(), " smaller than attention_scratch_numel(", T, ", ", threads,
             ") = ", attention_scratch_numel(T, threads));
}

// The fused form: qkv [B, T, 3C], out [B, T, C].
template <typename Tt>
AttnDims check_attention(const Tensor& qkv, const Tensor& lse, int n_head, const Tensor& scratch,
                         const char* op) {
  check_dtype<Tt>(qkv, op, "qkv");
  KIRI_CHECK(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, op, ": qkv must be [B, T, 3C], got ",
             qkv.shape().str());
  const int64_t C = qkv.dim(2) / 3;
  KIRI_CHECK(n_head > 0 && C % n_head == 0, op, ": n_head ", n_head, " does not divide C ", C,
             " of qkv ", qkv.shape().str());
  const AttnDims d{qkv.dim(0), qkv.dim(1), n_head, n_head, C / n_head, 3 * C, 3 * C, 3 * C, C};
  check_tensor<Tt>(lse, Shape{d.B, d.NH, d.T}, op, "lse");
  check_scratch<Tt>(scratch, d.T, op);
  return d;
}

// The grouped form: q [B, T, NH*hs], k and v [B, T, NKV*hs].
template <typename Tt>
AttnDims check_gqa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, int n_head,
                   int n_kv_head, const Tensor& scratch, const char* op) {
  check_dtype<Tt>(q, op, "q");
  KIRI_CHECK(q.rank() == 3 && n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0 &&
                 q.dim(2) % n_head == 0,
             op, ": q ", q.shape().str(), " must be [B, T, n_head*hs] with n_kv_head ", n_kv_head,
             " dividing n_head ", n_head);
  const int64_t B = q.dim(0), T = q.dim(1), hs = q.dim(2) / n_head, kv = n_kv_head * hs;
  check_tensor<Tt>(k, Shape{B, T, kv}, op, "k");
  check_tensor<Tt>(v, Shape{B, T, kv}, op, "v");
  check_tensor<Tt>(lse, Shape{B, n_head, T}, op, "lse");
  check_scratch<Tt>(scratch, T, op);
  return {B, T, n_head, n_kv_head, hs, q.dim(2), kv, kv, q.dim(2)};
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

// One (batch, head): q, k, v, o [T, hs] at their row strides, lse [T]; S is
// the thread's scratch.
template <typename T>
void head_forward(const T* q, const T* k, const T* v, T* o, T* lse, T* S, const AttnDims& d) {
  const T scale = T(1) / std::sqrt(static_cast<T>(d.hs));
  for (int64_t r0 = 0; r0 < d.T; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.T, r0 + kRowBlock), rb = r1 - r0, n = r1;
    // S[rb, n] = scale * Q[r0:r1] @ K[0:n]^T
    gemm<T>(false, true, rb, n, d.hs, scale, q + r0 * d.ldq, d.ldq, k, d.ldk, T(0), S, n);
    for (int64_t i = 0; i < rb; ++i) lse[r0 + i] = softmax_causal_row(S + i * n, r0 + i + 1, n);
    // O[r0:r1] = P[rb, n] @ V[0:n]
    gemm<T>(false, false, rb, d.hs, n, T(1), S, n, v, d.ldv, T(0), o + r0 * d.ldo, d.ldo);
  }
}

// Runs fn(pair, thread_scratch) for pairs [0, pairs) in parallel; `work` is
// the whole call's multiply-adds. An exception cannot leave an OpenMP region,
// so the first one is carried out and rethrown.
template <typename T, typename Fn>
void for_each_pair(int64_t pairs, int64_t work, int64_t T_len, T* scratch, Fn fn) {
  const int64_t slice = per_thread_numel(T_len);
  std::exception_ptr error;
#pragma omp parallel for schedule(static) if (pairs > 1 && work > detail::kMinParallelWork)
  for (int64_t p = 0; p < pairs; ++p) {
    try {
      fn(p, scratch + omp_get_thread_num() * slice);
    } catch (...) {
#pragma omp critical(kiri_attention_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

template <typename T>
void run_forward(const AttnDims& d, const AttnPtrs<T>& p, T* scratch) {
  for_each_pair(d.B * d.NH, d.B * d.NH * d.T * d.T * d.hs, d.T, scratch, [&](int64_t bh, T* S) {
    const int64_t b = bh / d.NH, h = bh % d.NH, kvh = h / d.group();
    head_forward(p.q + b * d.T * d.ldq + h * d.hs, p.k + b * d.T * d.ldk + kvh * d.hs,
                 p.v + b * d.T * d.ldv + kvh * d.hs, p.out + b * d.T * d.ldo + h * d.hs,
                 p.lse_out + (b * d.NH + h) * d.T, S, d);
  });
}

// Pointers of one (batch, head): q, k, v, o, dout at their strides, lse [T];
// gradients dq, dk, dv at the strides of q, k, v.
template <typename T>
struct HeadGrad {
  const T *q, *k, *v, *o, *dout, *lse;
  T *dq, *dk, *dv;
};

template <typename T>
void head_backward(const HeadGrad<T>& p, T* scratch, const AttnDims& d) {
  const int64_t hs = d.hs, rbmax = std::min(d.T, kRowBlock);
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  T* P = scratch;                 // [rb, n] probabilities, recomputed
  T* dP = scratch + rbmax * d.T;  // [rb, n] dP, then dS in place
  T* D = dP + rbmax * d.T;        // [T] D_i = rowsum(dO_i * O_i)
  for (int64_t i = 0; i < d.T; ++i) {
    T acc = 0;
    for (int64_t c = 0; c < hs; ++c) acc += p.dout[i * d.ldo + c] * p.o[i * d.ldo + c];
    D[i] = acc;
  }
  for (int64_t r0 = 0; r0 < d.T; r0 += kRowBlock) {
    const int64_t r1 = std::min(d.T, r0 + kRowBlock), rb = r1 - r0, n = r1;
    const T* dO = p.dout + r0 * d.ldo;  // [rb, hs]
    // P[rb, n] = exp(scale * Q K^T - lse), exactly 0 above the diagonal.
    gemm<T>(false, true, rb, n, hs, scale, p.q + r0 * d.ldq, d.ldq, p.k, d.ldk, T(0), P, n);
    for (int64_t i = 0; i < rb; ++i) {
      T* row = P + i * n;
      const T li = p.lse[r0 + i];
      const int64_t valid = r0 + i + 1;
#pragma omp simd
      for (int64_t j = 0; j < valid; ++j) row[j] = exp_fast(row[j] - li);
      std::fill(row + valid, row + n, T(0));
    }
    // dV[0:n] += P^T @ dO;  dP[rb, n] = dO @ V[0:n]^T
    gemm<T>(true, false, n, hs, rb, T(1), P, n, dO, d.ldo, T(1), p.dv, d.ldv);
    gemm<T>(false, true, rb, n, hs, T(1), dO, d.ldo, p.v, d.ldv, T(0), dP, n);
    // dS = P * (dP - D_i), into dP (zero where P is).
    for (int64_t i = 0; i < rb; ++i) {
      const T Di = D[r0 + i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) dP[i * n + j] = P[i * n + j] * (dP[i * n + j] - Di);
    }
    // dQ[r0:r1] += scale dS @ K[0:n];  dK[0:n] += scale dS^T @ Q[r0:r1]
    gemm<T>(false, false, rb, hs, n, scale, dP, n, p.k, d.ldk, T(1), p.dq + r0 * d.ldq, d.ldq);
    gemm<T>(true, false, n, hs, rb, scale, dP, n, p.q + r0 * d.ldq, d.ldq, T(1), p.dk, d.ldk);
  }
}

// One task per (batch, key/value head): its query heads in order, each adding
// into the shared dk and dv.
template <typename T>
void run_backward(const AttnDims& d, const AttnPtrs<T>& p, T* scratch) {
  const int64_t g = d.group();
  for_each_pair(d.B * d.NKV, d.B * d.NH * d.T * d.T * d.hs, d.T, scratch, [&](int64_t bk, T* S) {
    const int64_t b = bk / d.NKV, kvh = bk % d.NKV;
    const int64_t ko = b * d.T * d.ldk + kvh * d.hs, vo = b * d.T * d.ldv + kvh * d.hs;
    for (int64_t h = kvh * g; h < (kvh + 1) * g; ++h) {
      const int64_t qo = b * d.T * d.ldq + h * d.hs, oo = b * d.T * d.ldo + h * d.hs;
      const HeadGrad<T> hg{p.q + qo,  p.k + ko,    p.v + vo,
                           p.o + oo,  p.dout + oo, p.lse + (b * d.NH + h) * d.T,
                           p.dq + qo, p.dk + ko,   p.dv + vo};
      head_backward(hg, S, d);
    }
  });
}

}  // namespace

int64_t attention_scratch_numel(int64_t T, int threads) {
  KIRI_CHECK(T >= 0 && threads >= 1, "attention_scratch_numel: T=", T, " threads=", threads);
  return threads * per_thread_numel(T);
}

template <typename T>
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, Tensor& scratch) {
  const AttnDims d = check_attention<T>(qkv, lse, n_head, scratch, "attention_forward");
  check_tensor<T>(out, Shape{d.B, d.T, d.ldo}, "attention_forward", "out");
  const T* x = qkv.data<T>();  // [B, T, 3C]: q, k, v at columns 0, C, 2C
  const int64_t C = d.ldo;
  AttnPtrs<T> p{x,       x + C,   x + 2 * C,     nullptr,
                nullptr, nullptr, out.data<T>(), lse.data<T>(),
                nullptr, nullptr, nullptr};
  run_forward(d, p, scratch.data<T>());
}

template <typename T>
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Tensor& scratch) {
  const AttnDims d = check_attention<T>(qkv, lse, n_head, scratch, "attention_backward");
  check_tensor<T>(dqkv, qkv.shape(), "attention_backward", "dqkv");
  check_tensor<T>(out, Shape{d.B, d.T, d.ldo}, "attention_backward", "out");
  check_tensor<T>(dout, Shape{d.B, d.T, d.ldo}, "attention_backward", "dout");
  const T* x = qkv.data<T>();  // [B, T, 3C]
  T* dx = dqkv.data<T>();      // [B, T, 3C]
  const int64_t C = d.ldo;
  AttnPtrs<T> p{x,       x + C,   x + 2 * C, out.data<T>(), dout.data<T>(), lse.data<T>(),
                nullptr, nullptr, dx,        dx + C,        dx + 2 * C};
  run_backward(d, p, scratch.data<T>());
}

template <typename T>
void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int n_head, int n_kv_head, Tensor& scratch) {
  const char* op = "gqa_attention_forward";
  const AttnDims d = check_gqa<T>(q, k, v, lse, n_head, n_kv_head, scratch, op);
  check_tensor<T>(out, q.shape(), op, "out");
  AttnPtrs<T> p{q.data<T>(),   k.data<T>(),   v.data<T>(), nullptr, nullptr, nullptr,
                out.data<T>(), lse.data<T>(), nullptr,     nullptr, nullptr};
  run_forward(d, p, scratch.data<T>());
}

template <typename T>
void gqa_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            int n_head, int n_kv_head, Tensor& scratch) {
  const char* op = "gqa_attention_backward";
  const AttnDims d = check_gqa<T>(q, k, v, lse, n_head, n_kv_head, scratch, op);
  check_tensor<T>(out, q.shape(), op, "out");
  check_tensor<T>(dout, q.shape(), op, "dout");
  check_tensor<T>(dq, q.shape(), op, "dq");
  check_tensor<T>(dk, k.shape(), op, "dk");
  check_tensor<T>(dv, v.shape(), op, "dv");
  AttnPtrs<T> p{q.data<T>(),    k.data<T>(),   v.data<T>(), out.data<T>(),
                dout.data<T>(), lse.data<T>(), nullptr,     nullptr,
                dq.data<T>(),   dk.data<T>(),  dv.data<T>()};
  run_backward(d, p, scratch.data<T>());
}

template void attention_forward<float>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_forward<double>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, int, Tensor&);
template void attention_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, int, Tensor&);
template void gqa_attention_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, int, int, Tensor&);
template void gqa_attention_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, int, int, Tensor&);
template void gqa_attention_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, int, int, Tensor&);
template void gqa_attention_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, int, int, Tensor&);

}  // namespace kiri::kernels::cpu
