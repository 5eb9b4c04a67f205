// GEMM entry point: float to oneDNN's sgemm (measured 150-230 GFLOP/s here against 31 for
// OpenBLAS), double to kiri's own loop (gradient checks).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc) {
  detail::check_gemm_args("gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) return detail::scale_c(M, N, beta, C, ldc);
  const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                     lda, B, ldb, beta, C, ldc);
  KIRI_CHECK_KIND(kInternal, s == dnnl_success, "dnnl_sgemm failed with status ",
                  static_cast<int>(s), " for M=", M, " N=", N, " K=", K, " lda=", lda, " ldb=", ldb,
                  " ldc=", ldc);
}

namespace {

// C[i0..i0+R) += alpha * A(i, :) B for R <= kRows rows of C at once, so each row of B read
// from memory serves R rows. B is row-major [K, N] (ldb); every C[i][j] is summed over k in
// ascending order, whatever R and the thread count.
template <int R>
void dgemm_rows(bool trans_a, int64_t i0, int64_t N, int64_t K, double alpha, const double* A,
                int64_t lda, const double* B, int64_t ldb, double* C, int64_t ldc) {
  double* c[R];
  for (int r = 0; r < R; ++r) c[r] = C + (i0 + r) * ldc;
  for (int64_t k = 0; k < K; ++k) {
    double a[R];
    for (int r = 0; r < R; ++r)
      a[r] = alpha * (trans_a ? A[k * lda + i0 + r] : A[(i0 + r) * lda + k]);
    const double* b = B + k * ldb;
    for (int r = 0; r < R; ++r) {
      double* cr = c[r];
      const double ar = a[r];
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) cr[j] += ar * b[j];
    }
  }
}

}  // namespace

// double is kiri's own loop, not a BLAS: it serves the gradient checks (finite differences in
// double on small shapes), where a fixed order of the sums matters more than speed. Debian's
// pthread OpenBLAS, which it replaces, started a pool thread in every kiri process that spun
// through the process's first moments and skewed the GEMM-path timings taken then
// (docs/ci.md, "OpenBLAS's pool thread").
template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
                  const double* A, int64_t lda, const double* B, int64_t ldb, double beta,
                  double* C, int64_t ldc) {
  detail::check_gemm_args("gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  detail::scale_c(M, N, beta, C, ldc);  // beta == 0 clears NaNs, as BLAS does
  if (K == 0 || alpha == 0) return;
  // A transposed B is copied to row-major [K, N] once, so the inner loop runs along memory.
  std::vector<double> packed;
  if (trans_b) {
    packed.resize(static_cast<size_t>(K * N));
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) packed[static_cast<size_t>(k * N + j)] = B[j * ldb + k];
    B = packed.data();
    ldb = N;
  }
  constexpr int kRows = 4;
  const int64_t blocks = (M + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (M * N * K > detail::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * kRows;
    switch (std::min<int64_t>(kRows, M - i0)) {
      case 4:
        dgemm_rows<4>(trans_a, i0, N, K, alpha, A, lda, B, ldb, C, ldc);
        break;
      case 3:
        dgemm_rows<3>(trans_a, i0, N, K, alpha, A, lda, B, ldb, C, ldc);
        break;
      case 2:
        dgemm_rows<2>(trans_a, i0, N, K, alpha, A, lda, B, ldb, C, ldc);
        break;
      default:
        dgemm_rows<1>(trans_a, i0, N, K, alpha, A, lda, B, ldb, C, ldc);
        break;
    }
  }
}

}  // namespace kiri::kernels::cpu
