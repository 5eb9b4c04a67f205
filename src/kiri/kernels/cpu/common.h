#pragma once
// Internal to the CPU kernels: argument checks shared by the ops (every
// failure names the op, the argument and the shapes involved) and the
// parallelism threshold.
#include <algorithm>
#include <cstdint>

#include "kiri/base/error.h"
#include "kiri/tensor/tensor.h"

namespace kiri::kernels::cpu::detail {

// Below this many elements of work a loop runs on one thread: waking the team
// costs more than it saves (and far more when the cores are oversubscribed).
// Every parallel loop splits its work into the same pieces whatever the
// thread count, so running it serially gives the same result.
constexpr int64_t kMinParallelWork = 1 << 15;

// `t` is defined and holds T's dtype.
template <typename T>
inline void check_dtype(const Tensor& t, const char* op, const char* name) {
  KIRI_CHECK(t.defined(), op, ": ", name, " is undefined");
  KIRI_CHECK(t.dtype() == dtype_of<T>(), op, ": ", name, " ", t.shape().str(), " is ",
             dtype_name(t.dtype()), ", expected ", dtype_name(dtype_of<T>()));
}

// Defined, of dtype T, with exactly `shape`.
template <typename T>
inline void check_tensor(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  check_dtype<T>(t, op, name);
  KIRI_CHECK(t.shape() == shape, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
             shape.str());
}

// The last dimension (the row width) of a tensor of rank >= 1.
inline int64_t last_dim(const Tensor& t, const char* op, const char* name) {
  KIRI_CHECK(t.rank() >= 1, op, ": ", name, " must have rank >= 1, got ", t.shape().str());
  return t.dim(t.rank() - 1);
}

// The number of rows when the tensor is seen as [rows, last_dim].
inline int64_t rows_of(const Tensor& t) {
  const int64_t w = t.rank() == 0 ? 1 : t.dim(t.rank() - 1);
  return w == 0 ? 0 : t.numel() / w;
}

// Rows and width of `t` seen as a matrix, checked against the expected ones.
template <typename T>
inline void check_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* op,
                         const char* name) {
  check_dtype<T>(t, op, name);
  KIRI_CHECK(last_dim(t, op, name) == cols && rows_of(t) == rows, op, ": ", name, " has shape ",
             t.shape().str(), ", expected ", rows, " rows of ", cols);
}

// One value per row: per-row tensors (mean, rstd, lse, losses, targets) are
// [N] whatever their rank ([B, T] is fine).
template <typename T>
void check_per_row(const Tensor& t, int64_t N, const char* op, const char* name) {
  check_dtype<T>(t, op, name);
  KIRI_CHECK(t.numel() == N, op, ": ", name, " has shape ", t.shape().str(), ", expected ", N,
             " elements (one per row)");
}

// The leading dimensions must cover the stored rows: A is [M,K] ([K,M] when
// transposed), B is [K,N] ([N,K]), C is [M,N], all row-major. `op` names the
// caller in the message.
inline void check_gemm_args(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  KIRI_CHECK(M >= 0 && N >= 0 && K >= 0, op, ": negative size M=", M, " N=", N, " K=", K);
  const int64_t min_lda = std::max<int64_t>(1, trans_a ? M : K);
  const int64_t min_ldb = std::max<int64_t>(1, trans_b ? K : N);
  const int64_t min_ldc = std::max<int64_t>(1, N);
  KIRI_CHECK(lda >= min_lda && ldb >= min_ldb && ldc >= min_ldc, op,
             ": leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc, " too small for M=", M,
             " N=", N, " K=", K, " trans_a=", trans_a, " trans_b=", trans_b, " (need >= ", min_lda,
             ", ", min_ldb, ", ", min_ldc, ")");
}

// C = beta * C, what BLAS computes when K == 0 (beta == 0 clears NaNs too).
template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = C + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + N, T(0));
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] *= beta;
    }
  }
}

// dst[c] += sum over rows i < N of term(i, c), for c < C (bias and norm-weight gradients):
// blocks of 16 columns in parallel, each summed over the rows in order in double, so the
// result does not depend on the thread count.
template <typename T, typename Term>
void add_column_sums(T* dst, int64_t N, int64_t C, const Term& term) {
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, w = std::min(kBlock, C - c0);
    double acc[kBlock] = {};  // [w]
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(term(i, c0 + j));
    for (int64_t j = 0; j < w; ++j) dst[c0 + j] += static_cast<T>(acc[j]);
  }
}

}  // namespace kiri::kernels::cpu::detail
