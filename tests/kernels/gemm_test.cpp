#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using kernels::gemm;

// Row-major op(A)[M,K] @ op(B)[K,N] with padded leading dimensions, against a
// naive triple loop in double.
template <typename T>
void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, double beta,
                double tol) {
  const int64_t pad = 3;
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int64_t arows = ta ? K : M, brows = tb ? N : K;
  std::vector<T> A(arows * lda), B(brows * ldb), C(M * ldc);
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<T>(random_normal(1, 1, i));
  for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<T>(random_normal(1, 2, i));
  for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<T>(random_normal(1, 3, i));
  std::vector<T> C0 = C;
  gemm<T>(ta, tb, M, N, K, static_cast<T>(alpha), A.data(), lda, B.data(), ldb,
          static_cast<T>(beta), C.data(), ldc);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * lda + i] : A[i * lda + k];
        const double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        ref += a * b;
      }
      ref = alpha * ref + beta * C0[i * ldc + j];
      EXPECT_NEAR(C[i * ldc + j], ref, tol * (1 + std::abs(ref)))
          << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K << " at " << i
          << "," << j;
    }
    // The padding past column N is never written.
    for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(C[i * ldc + j], C0[i * ldc + j]);
  }
}

TEST(Gemm, FloatAllTransposesOddSizes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<float>(ta, tb, 7, 5, 3, 1.0, 0.0, 1e-5);
      check_gemm<float>(ta, tb, 7, 5, 3, 0.7, 0.3, 1e-5);
      check_gemm<float>(ta, tb, 33, 65, 17, -1.3, 1.0, 1e-5);
    }
}

TEST(Gemm, DoubleAllTransposesOddSizes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm<double>(ta, tb, 7, 5, 3, 0.7, 0.3, 1e-12);
      check_gemm<double>(ta, tb, 33, 65, 17, -1.3, 1.0, 1e-12);
    }
}

// kiri's own double loop (no BLAS): shapes above its parallel threshold and not a multiple of
// its 4-row blocks, alpha 0, and beta 0 over NaNs, which BLAS semantics clear.
TEST(Gemm, DoubleLargerShapesAlphaZeroAndBetaZeroOverNaN) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_gemm<double>(ta, tb, 66, 129, 71, 0.9, 0.0, 1e-12);
  std::vector<double> A(12, 1.0), B(12, 1.0), C(9, std::numeric_limits<double>::quiet_NaN());
  kernels::gemm<double>(false, false, 3, 3, 4, 1.0, A.data(), 4, B.data(), 3, 0.0, C.data(), 3);
  for (double c : C) EXPECT_EQ(c, 4.0);
  kernels::gemm<double>(false, false, 3, 3, 4, 0.0, A.data(), 4, B.data(), 3, 0.5, C.data(), 3);
  for (double c : C) EXPECT_EQ(c, 2.0);
}

// Every element is summed over k in order whatever the thread count: the gradient checks'
// double results do not depend on OMP_NUM_THREADS.
TEST(Gemm, DoubleIsBitwiseTheSameOnOneThreadAndOnThree) {
  const int threads = omp_get_max_threads();
  const int64_t M = 45, N = 97, K = 130;
  std::vector<double> A(M * K), B(N * K);
  for (size_t i = 0; i < A.size(); ++i) A[i] = random_normal(1, 4, i);
  for (size_t i = 0; i < B.size(); ++i) B[i] = random_normal(1, 5, i);
  for (bool tb : {false, true}) {
    std::vector<double> C1(M * N), C3(M * N);
    omp_set_num_threads(1);
    kernels::gemm<double>(false, tb, M, N, K, 1.0, A.data(), K, B.data(), tb ? K : N, 0.0,
                          C1.data(), N);
    omp_set_num_threads(3);
    kernels::gemm<double>(false, tb, M, N, K, 1.0, A.data(), K, B.data(), tb ? K : N, 0.0,
                          C3.data(), N);
    EXPECT_EQ(std::memcmp(C1.data(), C3.data(), C1.size() * sizeof(double)), 0) << "tb=" << tb;
  }
  omp_set_num_threads(threads);
}

TEST(Gemm, ZeroSizes) {
  std::vector<float> A(16, 1.0f), B(16, 1.0f);
  std::vector<float> C(16, 2.0f);
  // M or N zero: nothing to do, C untouched.
  kernels::gemm<float>(false, false, 0, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
  kernels::gemm<float>(false, false, 4, 0, 4, 1.0f, A.data(), 4, B.data(), 1, 0.0f, C.data(), 1);
  for (float c : C) EXPECT_EQ(c, 2.0f);
  // K zero: C = beta * C.
  kernels::gemm<float>(false, false, 4, 4, 0, 1.0f, A.data(), 1, B.data(), 4, 0.5f, C.data(), 4);
  for (float c : C) EXPECT_EQ(c, 1.0f);
  // ... and beta == 0 clears, NaNs included.
  C[3] = std::numeric_limits<float>::quiet_NaN();
  kernels::gemm<float>(false, false, 4, 4, 0, 1.0f, A.data(), 1, B.data(), 4, 0.0f, C.data(), 4);
  for (float c : C) EXPECT_EQ(c, 0.0f);
  std::vector<double> Cd(16, 2.0), Ad(16, 1.0);
  kernels::gemm<double>(true, true, 4, 4, 0, 1.0, Ad.data(), 4, Ad.data(), 1, 0.25, Cd.data(), 4);
  for (double c : Cd) EXPECT_EQ(c, 0.5);
}

TEST(Gemm, RejectsShortLeadingDimension) {
  std::vector<float> A(64), B(64), C(64);
  EXPECT_THROW(kernels::gemm<float>(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f,
                                    C.data(), 4),
               Error);
  EXPECT_THROW(
      kernels::gemm<float>(true, false, 4, 5, 3, 1.0f, A.data(), 3, B.data(), 5, 0.0f, C.data(), 5),
      Error);
}

}  // namespace
}  // namespace kiri
