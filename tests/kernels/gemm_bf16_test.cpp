#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

#include "gemm_lowp_paths.h"
#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"
#include "kiri/tensor/dtype.h"

namespace kiri {
namespace {

using kernels::gemm;
using kernels::gemm_bf16;

// A random matrix as bf16 bits plus the same values as floats, so the fp32
// reference sees exactly the inputs the bf16 GEMM sees.
struct Bf16Matrix {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

Bf16Matrix random_bf16(int64_t n, uint64_t stream) {
  Bf16Matrix m{std::vector<uint16_t>(n), std::vector<float>(n)};
  for (int64_t i = 0; i < n; ++i) {
    m.bits[i] = float_to_bf16(static_cast<float>(random_normal(7, stream, i)));
    m.values[i] = bf16_to_float(m.bits[i]);
  }
  return m;
}

// gemm_bf16 against gemm<float> on the rounded inputs, with padded leading
// dimensions. The products of bf16 values are exact in fp32, so only the
// order of the K + 2 fp32 roundings (the sum, alpha, beta C) differs: each
// side is within gamma_{K+2} (sum |alpha a b| + |beta c|) of the exact result
// for any order, gamma_n = n u / (1 - n u), u = 2^-24 (Higham, sec. 3.1), so
// they differ by at most twice that. The worst case, not the probabilistic
// sqrt(K) u, so that no order either path may use can fail it.
void check_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                     int64_t pad = 3) {
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const Bf16Matrix A = random_bf16((ta ? K : M) * lda, 1), B = random_bf16((tb ? N : K) * ldb, 2);
  std::vector<float> C(M * ldc);
  for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<float>(random_normal(7, 3, i));
  std::vector<float> ref = C, abs_ref(C.size());
  for (size_t i = 0; i < C.size(); ++i) abs_ref[i] = std::abs(C[i]);
  std::vector<float> absA(A.values.size()), absB(B.values.size());
  for (size_t i = 0; i < absA.size(); ++i) absA[i] = std::abs(A.values[i]);
  for (size_t i = 0; i < absB.size(); ++i) absB[i] = std::abs(B.values[i]);
  gemm<float>(ta, tb, M, N, K, alpha, A.values.data(), lda, B.values.data(), ldb, beta, ref.data(),
              ldc);
  gemm<float>(ta, tb, M, N, K, std::abs(alpha), absA.data(), lda, absB.data(), ldb, std::abs(beta),
              abs_ref.data(), ldc);
  std::vector<float> C0 = C;
  gemm_bf16(ta, tb, M, N, K, alpha, A.bits.data(), lda, B.bits.data(), ldb, beta, C.data(), ldc);
  const double u = std::ldexp(1.0, -24), gamma = (K + 2) * u / (1 - (K + 2) * u);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      const int64_t at = i * ldc + j;
      // abs_ref carries its own fp32 error, at most gamma of itself.
      EXPECT_NEAR(C[at], ref[at], 2 * gamma * (1 + gamma) * abs_ref[at])
          << "ta=" << ta << " tb=" << tb << " M=" << M << " N=" << N << " K=" << K
          << " alpha=" << alpha << " beta=" << beta << " at " << i << "," << j;
    }
    // The padding past column N is never written.
    for (int64_t j = N; j < ldc; ++j) EXPECT_EQ(C[i * ldc + j], C0[i * ldc + j]);
  }
}

// The tests that compute run through each gemm_lowp path.
class GemmBf16Path : public ::testing::TestWithParam<kernels::LowpGemmImpl> {};

TEST_P(GemmBf16Path, AllTransposesOddSizesAgainstFloat) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm_bf16(ta, tb, 7, 5, 3, 1.0f, 0.0f, 0);
      check_gemm_bf16(ta, tb, 7, 5, 3, 1.0f, 0.0f);
      check_gemm_bf16(ta, tb, 7, 5, 3, 0.7f, 0.3f);
      check_gemm_bf16(ta, tb, 33, 65, 17, 1.0f, 1.0f);
      check_gemm_bf16(ta, tb, 33, 65, 17, -1.3f, 1.0f, 5);
      check_gemm_bf16(ta, tb, 33, 65, 17, 0.5f, -2.0f);
      check_gemm_bf16(ta, tb, 130, 70, 300, 1.0f, 0.0f, 16);
    }
}

TEST_P(GemmBf16Path, BetaZeroOverwritesNaN) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  const int64_t M = 4, N = 6, K = 5;
  const Bf16Matrix A = random_bf16(M * K, 4), B = random_bf16(K * N, 5);
  std::vector<float> C(M * N, std::numeric_limits<float>::quiet_NaN()), ref(M * N);
  gemm_bf16(false, false, M, N, K, 1.0f, A.bits.data(), K, B.bits.data(), N, 0.0f, C.data(), N);
  gemm<float>(false, false, M, N, K, 1.0f, A.values.data(), K, B.values.data(), N, 0.0f, ref.data(),
              N);
  // Within twice gamma_{K+1} of sum |a b| (see check_gemm_bf16), and not NaN.
  const double u = std::ldexp(1.0, -24), gamma = (K + 1) * u / (1 - (K + 1) * u);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::abs(A.values[i * K + k] * B.values[k * N + j]);
      EXPECT_NEAR(C[i * N + j], ref[i * N + j], 2 * gamma * mag) << i << "," << j;
    }
}

TEST(GemmBf16, ZeroSizes) {
  std::vector<uint16_t> A(16, float_to_bf16(1.0f)), B(16, float_to_bf16(1.0f));
  std::vector<float> C(16, 2.0f);
  // M or N zero: nothing to do, C untouched.
  gemm_bf16(false, false, 0, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4);
  gemm_bf16(false, false, 4, 0, 4, 1.0f, A.data(), 4, B.data(), 1, 0.0f, C.data(), 1);
  for (float c : C) EXPECT_EQ(c, 2.0f);
  // K zero: C = beta * C, and beta == 0 clears NaNs too.
  gemm_bf16(false, false, 4, 4, 0, 1.0f, A.data(), 1, B.data(), 4, 0.5f, C.data(), 4);
  for (float c : C) EXPECT_EQ(c, 1.0f);
  C[3] = std::numeric_limits<float>::quiet_NaN();
  gemm_bf16(true, true, 4, 4, 0, 1.0f, A.data(), 4, B.data(), 1, 0.0f, C.data(), 4);
  for (float c : C) EXPECT_EQ(c, 0.0f);
}

TEST(GemmBf16, RejectsBadArguments) {
  std::vector<uint16_t> A(64), B(64);
  std::vector<float> C(64);
  EXPECT_THROW(gemm_bf16(false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(), 4, 0.0f, C.data(), 4),
               Error);
  EXPECT_THROW(gemm_bf16(true, false, 4, 5, 3, 1.0f, A.data(), 3, B.data(), 5, 0.0f, C.data(), 5),
               Error);
  EXPECT_THROW(gemm_bf16(false, false, -1, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 4),
               Error);
}

// A repeated call gives bitwise the same result; on the oneDNN path it is
// served from the primitive cache (the first call JIT-compiles), and
// interleaving other keys must not disturb that.
TEST_P(GemmBf16Path, RepeatedCallsAreBitwiseEqual) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  const int64_t M = 33, N = 65, K = 17;
  const Bf16Matrix A = random_bf16(K * M, 6), B = random_bf16(N * K, 7);
  std::vector<float> first(M * N, 1.0f), again(M * N, 1.0f), other(8 * 8);
  gemm_bf16(true, true, M, N, K, 0.5f, A.bits.data(), M, B.bits.data(), K, 0.25f, first.data(), N);
  for (int rep = 0; rep < 3; ++rep) {
    gemm_bf16(false, false, 8, 8, 8, 1.0f, A.bits.data(), 8, B.bits.data(), 8, 0.0f, other.data(),
              8);
    std::fill(again.begin(), again.end(), 1.0f);
    gemm_bf16(true, true, M, N, K, 0.5f, A.bits.data(), M, B.bits.data(), K, 0.25f, again.data(),
              N);
    EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size() * sizeof(float)), 0);
  }
  // A different alpha reuses the scaled primitive (alpha is a run-time scale).
  gemm_bf16(true, true, M, N, K, 1.0f, A.bits.data(), M, B.bits.data(), K, 0.0f, again.data(), N);
  for (float& c : again) c *= 0.5f;
  std::vector<float> half(M * N);
  gemm_bf16(true, true, M, N, K, 0.5f, A.bits.data(), M, B.bits.data(), K, 0.0f, half.data(), N);
  for (int64_t i = 0; i < M * N; ++i) EXPECT_FLOAT_EQ(half[i], again[i]);
}

// Threads sharing the cache (same and different keys) each get the result a
// single call gives.
TEST_P(GemmBf16Path, ConcurrentCallersShareTheCache) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  const int64_t n = 24;
  const Bf16Matrix A = random_bf16(n * n, 10), B = random_bf16(n * n, 11);
  std::vector<std::vector<float>> expected(4, std::vector<float>(n * n));
  for (int k = 0; k < 4; ++k)
    gemm_bf16(k & 1, k & 2, n - k, n, n, 1.0f, A.bits.data(), n, B.bits.data(), n, 0.0f,
              expected[k].data(), n);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::vector<float> C(n * n);
      for (int rep = 0; rep < 20; ++rep) {
        const int k = (t + rep) % 4;
        gemm_bf16(k & 1, k & 2, n - k, n, n, 1.0f, A.bits.data(), n, B.bits.data(), n, 0.0f,
                  C.data(), n);
        mismatches[t] +=
            std::memcmp(C.data(), expected[k].data(), (n - k) * n * sizeof(float)) != 0;
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(Paths, GemmBf16Path, test::kGemmLowpPaths, test::gemm_lowp_path_name);

// GFLOP/s of gemm_bf16 against gemm<float> on the GEMMs of a `tiny` training
// step (1024 rows). Timing only, so skipped unless asked for:
//   KIRI_BENCH_GEMM_BF16=1 OMP_NUM_THREADS=1 ./build/tests/kiri_kernels_tests
//     --gtest_filter=GemmBf16.Benchmark
double best_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: primitive creation, page faults
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

TEST(GemmBf16, Benchmark) {
  if (!std::getenv("KIRI_BENCH_GEMM_BF16")) GTEST_SKIP() << "set KIRI_BENCH_GEMM_BF16=1";
  struct Shape {
    bool ta, tb;
    int64_t M, N, K;
  };
  const Shape shapes[] = {{false, false, 1024, 768, 256},  {false, false, 1024, 256, 256},
                          {false, false, 1024, 1024, 256}, {false, false, 1024, 256, 1024},
                          {false, true, 1024, 50257, 256}, {false, false, 1024, 256, 50257},
                          {true, false, 256, 50257, 1024}};
  std::printf("threads %d\n| op | M x N x K | fp32 GFLOP/s | bf16 GFLOP/s | speed-up |\n",
              omp_get_max_threads());
  for (const Shape& s : shapes) {
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const Bf16Matrix A = random_bf16(s.M * s.K, 8), B = random_bf16(s.K * s.N, 9);
    std::vector<float> C(s.M * s.N);
    const double flops = 2.0 * s.M * s.N * s.K;
    const int reps = flops > 2e10 ? 3 : 10;
    const double t32 = best_seconds(
        [&] {
          gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.values.data(), lda, B.values.data(), ldb,
                      0.0f, C.data(), s.N);
        },
        reps);
    const double t16 = best_seconds(
        [&] {
          gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A.bits.data(), lda, B.bits.data(), ldb, 0.0f,
                    C.data(), s.N);
        },
        reps);
    std::printf("| %s%s | %lld x %lld x %lld | %.0f | %.0f | %.2fx |\n", s.ta ? "T" : "N",
                s.tb ? "T" : "N", static_cast<long long>(s.M), static_cast<long long>(s.N),
                static_cast<long long>(s.K), flops / t32 * 1e-9, flops / t16 * 1e-9, t32 / t16);
  }
}

}  // namespace
}  // namespace kiri
