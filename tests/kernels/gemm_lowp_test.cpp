// gemm_lowp, through each path, against a double reference on the
// 16-bit-rounded inputs.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <tuple>
#include <vector>

#include "gemm_lowp_paths.h"
#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/ops.h"
#include "kiri/tensor/dtype.h"

namespace kiri {
namespace {

using kernels::LowpGemmImpl;

uint16_t to_lowp(DType dt, float f) {
  return dt == DType::kBF16 ? float_to_bf16(f) : float_to_half(f);
}
float from_lowp(DType dt, uint16_t h) {
  return dt == DType::kBF16 ? bf16_to_float(h) : half_to_float(h);
}

// n random 16-bit values (normal, seed 11) and the same values as doubles.
struct LowpMatrix {
  std::vector<uint16_t> bits;
  std::vector<double> values;
};
LowpMatrix random_lowp(DType dt, int64_t n, uint64_t stream) {
  LowpMatrix m{std::vector<uint16_t>(n), std::vector<double>(n)};
  for (int64_t i = 0; i < n; ++i) {
    m.bits[i] = to_lowp(dt, static_cast<float>(random_normal(11, stream, i)));
    m.values[i] = from_lowp(dt, m.bits[i]);
  }
  return m;
}

struct Case {
  DType ab;
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  DType c_dtype;
  int64_t pad;
};

// The error bound of a 16-bit GEMM with fp32 accumulation against the exact
// result on the same 16-bit inputs, for any summation order (both paths
// block K differently): each product of two 8-bit (bf16) or 11-bit (fp16)
// significands is exact in fp32's 24 bits, the K-term sum, alpha and beta*C
// add K + 2 roundings, so |err| <= gamma_{K+2} * (sum |alpha a b| + |beta c|)
// with gamma_n = n u32 / (1 - n u32), u32 = 2^-24 (Higham, Accuracy and
// Stability, 2nd ed., sec. 3.1 and 3.5). The worst case rather than the
// probabilistic sqrt(K) u32 because it must hold for every input and order;
// it is still far below a 16-bit rounding (K = 9000: 5.4e-4 against 2^-8 =
// 3.9e-3), so an intermediate rounded to 16 bits fails. A 16-bit C adds its
// one final rounding: u16 |result| (u16 = 2^-8 bf16, 2^-11 fp16) plus, for
// fp16, half its subnormal spacing 2^-25.
double gamma32(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}
double lowp_unit_roundoff(DType dt) {
  return std::ldexp(1.0, dt == DType::kBF16 ? -8 : -11);
}

// C is stored [M, ldc] with ldc = N + pad; the padding must stay untouched.
// Returns the largest error as a fraction of the bound.
double check_case(const Case& c) {
  const int64_t lda = std::max<int64_t>(1, (c.ta ? c.M : c.K) + c.pad);
  const int64_t ldb = std::max<int64_t>(1, (c.tb ? c.K : c.N) + c.pad);
  const int64_t ldc = c.N + c.pad;
  const LowpMatrix A = random_lowp(c.ab, (c.ta ? c.K : c.M) * lda + 1, 1);
  const LowpMatrix B = random_lowp(c.ab, (c.tb ? c.N : c.K) * ldb + 1, 2);
  const LowpMatrix C0 = random_lowp(c.ab, c.M * ldc, 3);
  std::vector<float> c32(C0.values.begin(), C0.values.end());
  std::vector<uint16_t> c16 = C0.bits;
  void* C = c.c_dtype == DType::kF32 ? static_cast<void*>(c32.data()) : c16.data();
  if (c.beta == 0.0f && c.M > 0) {  // beta 0 must not read C, even NaN
    c32[0] = std::numeric_limits<float>::quiet_NaN();
    c16[0] = 0x7fc0;
  }
  kernels::gemm_lowp(c.ab, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.bits.data(), lda, B.bits.data(),
                     ldb, c.beta, C, c.c_dtype, ldc);
  const bool lowp_c = c.c_dtype != DType::kF32;
  const double u16 = lowp_c ? lowp_unit_roundoff(c.ab) : 0.0;
  const double floor16 = lowp_c && c.ab == DType::kF16 ? std::ldexp(1.0, -25) : 0.0;
  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < c.N; ++j) {
      double ref = c.beta == 0.0f ? 0.0 : c.beta * C0.values[i * ldc + j], mag = std::abs(ref);
      for (int64_t k = 0; k < c.K; ++k) {
        const double a = A.values[c.ta ? k * lda + i : i * lda + k];
        const double b = B.values[c.tb ? j * ldb + k : k * ldb + j];
        ref += c.alpha * a * b;
        mag += std::abs(c.alpha * a * b);
      }
      const int64_t at = i * ldc + j;
      const double got = lowp_c ? from_lowp(c.ab, c16[at]) : c32[at];
      const double bound = u16 * std::abs(ref) + (1 + u16) * gamma32(c.K + 2) * mag + floor16;
      if (bound > 0) worst = std::max(worst, std::abs(got - ref) / bound);
      EXPECT_LE(std::abs(got - ref), bound)
          << dtype_name(c.ab) << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N
          << " K=" << c.K << " alpha=" << c.alpha << " beta=" << c.beta << " C "
          << dtype_name(c.c_dtype) << " at " << i << "," << j << ": got " << got << ", exact "
          << ref;
      if (std::abs(got - ref) > bound) return worst;  // one message per case
    }
    for (int64_t j = c.N; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      const double kept = lowp_c ? from_lowp(c.ab, c16[at]) : c32[at];
      EXPECT_EQ(kept, C0.values[at]) << "padding written at " << i << "," << j;
      if (kept != C0.values[at]) return worst;
    }
  }
  return worst;
}

// The largest error over its bound, by C's dtype (a 16-bit C's bound is
// mostly its final rounding, which is attained: ratios near 1 are expected).
struct Worst {
  double f32_c = 0, lowp_c = 0;
  void add(const Case& c, double w) {
    double& m = c.c_dtype == DType::kF32 ? f32_c : lowp_c;
    m = std::max(m, w);
  }
  void record() const {
    ::testing::Test::RecordProperty("worst_over_bound_f32_c", std::to_string(f32_c));
    ::testing::Test::RecordProperty("worst_over_bound_lowp_c", std::to_string(lowp_c));
  }
};

// (path, dtype of A and B): every path on every dtype, skipped with the
// reason where this CPU has no oneDNN kernel for it.
class GemmLowpPath : public ::testing::TestWithParam<std::tuple<LowpGemmImpl, DType>> {
 protected:
  LowpGemmImpl impl() const { return std::get<0>(GetParam()); }
  DType ab() const { return std::get<1>(GetParam()); }
};

void check_dtype(DType ab, Worst& worst) {
  for (DType cd : {DType::kF32, ab})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const Case& c : {Case{ab, ta, tb, 7, 5, 3, 1.0f, 0.0f, cd, 0},
                              Case{ab, ta, tb, 33, 65, 17, 1.0f, 1.0f, cd, 3},
                              Case{ab, ta, tb, 33, 65, 17, 0.5f, 1.0f, cd, 0},
                              Case{ab, ta, tb, 19, 70, 300, -1.5f, 0.0f, cd, 16},
                              Case{ab, ta, tb, 4, 6, 0, 1.0f, 1.0f, cd, 2},  // K = 0: C = beta C
                              Case{ab, ta, tb, 4, 6, 0, 1.0f, 0.0f, cd, 0},
                              Case{ab, ta, tb, 0, 6, 5, 1.0f, 0.0f, cd, 1}})
          worst.add(c, check_case(c));
}

TEST_P(GemmLowpPath, AllTransposesAndOddSizes) {
  KIRI_USE_GEMM_LOWP(impl(), ab());
  Worst worst;
  check_dtype(ab(), worst);
  worst.record();
}

// Long K (split into blocks on the fp32 path), wide panels and a 16-bit C
// rounded once; then the fp32 path's panels shared by several C blocks (1 MiB
// panels of at least 256 rows or columns): K blocks outermost over 3 row
// blocks accumulating into C, one B panel for 4 row blocks, a 16-bit C of 1000
// columns in row blocks of all of them, one A panel per row for 2 column blocks
// of a 16-bit C of 1100 columns, K in 6 blocks of 873 so that a B panel holds
// all 300 columns (2 row blocks), a 16-bit C in 2 blocks of 374 rows, and a K of 1000 in 3
// blocks of 334 so that a B panel holds all 600 columns of an fp32 C.
TEST_P(GemmLowpPath, LongKAndWidePanels) {
  KIRI_USE_GEMM_LOWP(impl(), ab());
  Worst worst;
  for (const Case& c : {Case{ab(), true, false, 9, 11, 9000, 1.0f, 1.0f, ab(), 1},
                        Case{ab(), false, true, 3, 70000, 64, 1.0f, 0.0f, DType::kF32, 0},
                        Case{ab(), false, false, 5, 7, 9000, 1.0f, 0.0f, DType::kF32, 0},
                        Case{ab(), false, false, 600, 9, 9000, 1.0f, 1.0f, DType::kF32, 0},
                        Case{ab(), true, false, 1000, 20, 1024, 1.0f, 0.0f, DType::kF32, 2},
                        Case{ab(), false, true, 300, 1000, 1024, -0.5f, 1.0f, ab(), 3},
                        Case{ab(), false, true, 300, 1100, 300, -0.5f, 1.0f, ab(), 0},
                        Case{ab(), false, false, 310, 300, 4500, 1.0f, 1.0f, DType::kF32, 1},
                        Case{ab(), true, false, 600, 700, 64, 1.0f, 1.0f, ab(), 0},
                        Case{ab(), false, true, 70, 600, 1000, 1.0f, 1.0f, DType::kF32, 1}})
    worst.add(c, check_case(c));
  worst.record();
}

// Threads calling with the same keys at once (as ranks-as-threads training
// does) each get bitwise what a single call gives: shapes that need oneDNN
// scratchpad (a 16-bit C accumulated with beta 1, transposes, K 300) and
// primitives created on one thread and executed on others, one OpenMP thread
// each as the ranks use (oneDNN's library scratchpad broke exactly this).
TEST_P(GemmLowpPath, ConcurrentCallersGetTheSingleCallResult) {
  KIRI_USE_GEMM_LOWP(impl(), ab());
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const int64_t M = 96, N = 80, K = 300;
  const LowpMatrix A = random_lowp(ab(), M * K, 4), B = random_lowp(ab(), K * N, 5);
  const LowpMatrix C0 = random_lowp(ab(), M * N, 6);
  auto call = [&](int k, std::vector<uint16_t>& c) {
    const bool ta = k & 1, tb = k & 2;
    c = C0.bits;
    kernels::gemm_lowp(ab(), ta, tb, M, N, K, 1.0f, A.bits.data(), ta ? M : K, B.bits.data(),
                       tb ? K : N, 1.0f, c.data(), ab(), N);
  };
  std::vector<std::vector<uint16_t>> expected(4);
  for (int k = 0; k < 4; ++k) call(k, expected[k]);
  std::vector<int> mismatches(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      omp_set_num_threads(1);
      std::vector<uint16_t> c;
      for (int rep = 0; rep < 100; ++rep) {
        const int k = (t + rep) % 4;
        call(k, c);
        mismatches[t] += std::memcmp(c.data(), expected[k].data(), M * N * sizeof(uint16_t)) != 0;
      }
    });
  for (std::thread& th : threads) th.join();
  omp_set_num_threads(saved_threads);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// The widened path with more OpenMP threads than the test's 2: each thread takes whole C
// blocks, or a share of the columns where K is split. Within the bound and the same bits on a
// second call: K in 9 blocks over 300 columns (k_outer, 3 column shares), one widened A shared
// by 3 column blocks, one widened B shared by 6 row blocks of a 16-bit C, and a 16-bit C in 3
// column blocks with K in 5 blocks. (Not bitwise the same as on 1 thread: oneDNN's sgemm may
// sum a C element differently when the block around it has other sizes.)
TEST(GemmLowp, ViaF32OnThreeThreadsMeetsTheBoundAndRepeatsBitwise) {
  const test::ScopedGemmLowp scope(LowpGemmImpl::kViaF32);
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  Worst worst;
  for (const Case& c :
       {Case{DType::kBF16, false, true, 20, 300, 9000, 1.0f, 1.0f, DType::kF32, 0},
        Case{DType::kBF16, false, true, 100, 9000, 64, 1.0f, 1.0f, DType::kF32, 1},
        Case{DType::kF16, true, false, 8000, 100, 64, 1.0f, 1.0f, DType::kF16, 0},
        Case{DType::kBF16, true, false, 40, 600, 4200, 0.5f, 1.0f, DType::kBF16, 2}}) {
    worst.add(c, check_case(c));
    const int64_t n_a = c.M * c.K, n_b = c.K * c.N, n_c = c.M * c.N;
    const LowpMatrix A = random_lowp(c.ab, n_a, 21), B = random_lowp(c.ab, n_b, 22);
    const LowpMatrix C0 = random_lowp(c.ab, n_c, 23);
    std::vector<std::vector<char>> out;
    for (int call = 0; call < 2; ++call) {
      std::vector<float> c32(C0.values.begin(), C0.values.end());
      std::vector<uint16_t> c16 = C0.bits;
      void* C = c.c_dtype == DType::kF32 ? static_cast<void*>(c32.data()) : c16.data();
      kernels::gemm_lowp(c.ab, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.bits.data(), c.ta ? c.M : c.K,
                         B.bits.data(), c.tb ? c.K : c.N, c.beta, C, c.c_dtype, c.N);
      const char* bytes = static_cast<const char*>(C);
      out.emplace_back(bytes, bytes + n_c * dtype_size(c.c_dtype));
    }
    EXPECT_TRUE(out[0] == out[1]) << c.M << " x " << c.N << " x " << c.K;
  }
  worst.record();
  omp_set_num_threads(saved_threads);
}

// A 16-bit C accumulated with beta 1 is round(C + the product summed in fp32), one rounding:
// the product computed alone into an fp32 C (the same single block and sgemm call) and added
// to C in fp32 gives the same bits, on the path that adds the product into C as it rounds.
TEST(GemmLowp, ViaF32SixteenBitCIsCPlusTheSumRoundedOnce) {
  const test::ScopedGemmLowp scope(LowpGemmImpl::kViaF32);
  const int64_t M = 50, N = 60, K = 300;
  for (DType ab : {DType::kBF16, DType::kF16}) {
    const LowpMatrix A = random_lowp(ab, K * M, 31), B = random_lowp(ab, K * N, 32);
    const LowpMatrix C0 = random_lowp(ab, M * N, 33);
    std::vector<float> product(static_cast<size_t>(M * N), 0.0f);
    kernels::gemm_lowp(ab, true, false, M, N, K, 1.0f, A.bits.data(), M, B.bits.data(), N, 0.0f,
                       product.data(), DType::kF32, N);
    std::vector<uint16_t> c = C0.bits;
    kernels::gemm_lowp(ab, true, false, M, N, K, 1.0f, A.bits.data(), M, B.bits.data(), N, 1.0f,
                       c.data(), ab, N);
    int mismatches = 0;
    for (int64_t i = 0; i < M * N; ++i)
      mismatches += c[i] != to_lowp(ab, static_cast<float>(C0.values[i]) + product[i]);
    EXPECT_EQ(mismatches, 0) << dtype_name(ab);
  }
}

// C's bytes after the packed kernel computed case c on `threads` OpenMP threads (seeds 41-43),
// or nothing when it did not take the case.
std::vector<char> packed_bytes(const Case& c, int threads) {
  const int64_t lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad;
  const int64_t ldc = c.N + c.pad;
  const LowpMatrix A = random_lowp(c.ab, (c.ta ? c.K : c.M) * lda, 41);
  const LowpMatrix B = random_lowp(c.ab, (c.tb ? c.N : c.K) * ldb, 42);
  const LowpMatrix C0 = random_lowp(c.ab, c.M * ldc, 43);
  std::vector<float> c32(C0.values.begin(), C0.values.end());
  std::vector<uint16_t> c16 = C0.bits;
  void* C = c.c_dtype == DType::kF32 ? static_cast<void*>(c32.data()) : c16.data();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const bool took = kernels::cpu::detail::gemm_lowp_packed(
      {c.ab, c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.bits.data(), lda, B.bits.data(), ldb, c.beta, C,
       c.c_dtype, ldc});
  omp_set_num_threads(saved);
  if (!took) return {};
  const char* bytes = static_cast<const char*>(C);
  return {bytes, bytes + c.M * ldc * static_cast<int64_t>(dtype_size(c.c_dtype))};
}

// The packed kernel takes every shape with an operand it packs whole, and an fp32 C whose A
// packs a K block at a time: within the bound (through gemm_lowp, on 3 threads) and the same
// bits on 1 and 3 threads, since each C element is summed in the same K blocks and k order
// however the threads cut C. A packed whole: K in 3 blocks (the last short), N in column
// blocks per thread, edges in M and N; B packed whole (M > N), 16-bit C in one K block
// (rounded by the kernel, beta 0 and 1) and in 3 (through an fp32 panel, either operand packed
// whole); K blocks outermost for a long K into an fp32 C. It declines a 16-bit C that neither
// operand packs whole and a 16-bit C with beta other than 0 or 1 (via_f32 takes them).
TEST(GemmLowp, PackedIsWithinTheBoundAndBitwiseTheSameOnAnyThreadCount) {
  if (!kernels::gemm_lowp_available(LowpGemmImpl::kPacked, DType::kBF16))
    GTEST_SKIP() << "this build has no packed kernel (neither AVX-512 nor AVX2 with FMA)";
  const test::ScopedGemmLowp scope(LowpGemmImpl::kPacked);
  const int saved_threads = omp_get_max_threads();
  Worst worst;
  const DType b = DType::kBF16, h = DType::kF16, f = DType::kF32;
  for (const Case& c : {Case{b, false, false, 37, 500, 600, 1.0f, 1.0f, f, 3},
                        Case{h, true, true, 37, 500, 600, -0.5f, 0.0f, f, 0},
                        Case{b, false, true, 1000, 100, 300, 1.0f, 1.0f, b, 1},
                        Case{b, true, false, 300, 130, 256, 1.0f, 1.0f, b, 0},
                        Case{h, true, false, 61, 200, 100, 1.0f, 0.0f, h, 2},
                        Case{b, true, false, 200, 99, 700, 2.0f, 1.0f, b, 0},
                        Case{b, false, false, 50, 300, 600, 1.0f, 1.0f, b, 1},
                        Case{b, false, false, 20, 60, 60000, 1.0f, 1.0f, f, 0}}) {
    omp_set_num_threads(3);
    worst.add(c, check_case(c));
    const std::vector<char> one = packed_bytes(c, 1), three = packed_bytes(c, 3);
    EXPECT_FALSE(one.empty()) << "declined " << c.M << " x " << c.N << " x " << c.K;
    EXPECT_TRUE(one == three) << c.M << " x " << c.N << " x " << c.K;
  }
  omp_set_num_threads(saved_threads);
  worst.record();
  EXPECT_TRUE(packed_bytes({b, false, false, 20, 60, 60000, 1.0f, 1.0f, b, 0}, 1).empty());
  EXPECT_TRUE(packed_bytes({b, true, false, 30, 40, 50, 1.0f, 0.5f, b, 0}, 1).empty());
}

INSTANTIATE_TEST_SUITE_P(Paths, GemmLowpPath,
                         ::testing::Combine(::testing::Values(LowpGemmImpl::kViaF32,
                                                              LowpGemmImpl::kOneDnnMatmul,
                                                              LowpGemmImpl::kPacked),
                                            ::testing::Values(DType::kBF16, DType::kF16)),
                         [](const auto& info) {
                           return std::string(
                                      kernels::gemm_lowp_impl_name(std::get<0>(info.param))) +
                                  "_" + (std::get<1>(info.param) == DType::kBF16 ? "bf16" : "fp16");
                         });

// kAuto (whichever path this CPU takes) meets the same bound.
TEST(GemmLowp, AutoAllTransposesDtypesAndOddSizes) {
  const test::ScopedGemmLowp scope(LowpGemmImpl::kAuto);
  Worst worst;
  check_dtype(DType::kBF16, worst);
  check_dtype(DType::kF16, worst);
  worst.record();
}

// The path names, KIRI_GEMM_LOWP's values, round-trip; others are refused
// with a kConfig error naming the value.
TEST(GemmLowp, PathNamesAndAvailability) {
  for (LowpGemmImpl impl : {LowpGemmImpl::kAuto, LowpGemmImpl::kOneDnnMatmul, LowpGemmImpl::kViaF32,
                            LowpGemmImpl::kPacked})
    EXPECT_EQ(kernels::parse_gemm_lowp_impl(kernels::gemm_lowp_impl_name(impl)), impl);
  try {
    kernels::parse_gemm_lowp_impl("amx");
    ADD_FAILURE() << "accepted \"amx\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("auto | onednn | via_f32 | packed, got \"amx\""), std::string::npos)
        << e.message();
  }
  for (DType dt : {DType::kBF16, DType::kF16}) {
    EXPECT_TRUE(kernels::gemm_lowp_available(LowpGemmImpl::kViaF32, dt));
    EXPECT_TRUE(kernels::gemm_lowp_available(LowpGemmImpl::kAuto, dt));
    // Available exactly when oneDNN names a kernel; a forced path that is not
    // available falls back, and the effective path says so.
    const bool onednn = kernels::gemm_lowp_available(LowpGemmImpl::kOneDnnMatmul, dt);
    EXPECT_EQ(onednn, !kernels::gemm_lowp_onednn_kernel(dt).empty());
    const test::ScopedGemmLowp scope(LowpGemmImpl::kOneDnnMatmul);
    EXPECT_EQ(kernels::gemm_lowp_path(dt),
              onednn ? LowpGemmImpl::kOneDnnMatmul : LowpGemmImpl::kViaF32);
    EXPECT_EQ(kernels::gemm_lowp_path_description(dt),
              onednn ? "onednn (" + kernels::gemm_lowp_onednn_kernel(dt) + ")" : "via_f32");
    kernels::set_gemm_lowp_impl(LowpGemmImpl::kViaF32);
    EXPECT_EQ(kernels::gemm_lowp_path(dt), LowpGemmImpl::kViaF32);
    EXPECT_EQ(kernels::gemm_lowp_path_description(dt), "via_f32");
    // The packed kernel: in a build for AVX-512, or AVX2 with FMA and F16C (this one's
    // compiler flags say).
#if (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)) || \
    (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))
    const bool packed = true;
#else
    const bool packed = false;
#endif
    EXPECT_EQ(kernels::gemm_lowp_available(LowpGemmImpl::kPacked, dt), packed);
    kernels::set_gemm_lowp_impl(LowpGemmImpl::kPacked);
    EXPECT_EQ(kernels::gemm_lowp_path(dt), packed ? LowpGemmImpl::kPacked : LowpGemmImpl::kViaF32);
    EXPECT_EQ(kernels::gemm_lowp_path_description(dt), packed ? "packed" : "via_f32");
  }
  EXPECT_THROW(kernels::gemm_lowp_available(LowpGemmImpl::kViaF32, DType::kF32), Error);
}

// KIRI_GEMM_LOWP is read once per process, so each case runs in a freshly
// started child (the death test's "threadsafe" style re-executes the binary).
int path_from_env(const char* value) {
  setenv("KIRI_GEMM_LOWP", value, 1);
  try {
    return static_cast<int>(kernels::gemm_lowp_impl());
  } catch (const Error& e) {
    std::fprintf(stderr, "%s kind %s\n", e.what(), error_kind_name(e.kind()));
    return 9;
  }
}

TEST(GemmLowp, EnvironmentVariableChoosesThePath) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(path_from_env("onednn")),
              ::testing::ExitedWithCode(static_cast<int>(LowpGemmImpl::kOneDnnMatmul)), "");
  EXPECT_EXIT(std::_Exit(path_from_env("via_f32")),
              ::testing::ExitedWithCode(static_cast<int>(LowpGemmImpl::kViaF32)), "");
  EXPECT_EXIT(std::_Exit(path_from_env("packed")),
              ::testing::ExitedWithCode(static_cast<int>(LowpGemmImpl::kPacked)), "");
  EXPECT_EXIT(std::_Exit(path_from_env("")),
              ::testing::ExitedWithCode(static_cast<int>(LowpGemmImpl::kAuto)), "");
  EXPECT_EXIT(std::_Exit(path_from_env("oneDNN")), ::testing::ExitedWithCode(9),
              "KIRI_GEMM_LOWP: .*auto \\| onednn \\| via_f32 \\| packed, got \"oneDNN\".* "
              "kind config");
}

TEST(GemmLowp, RejectsBadArguments) {
  std::vector<uint16_t> A(64), B(64);
  std::vector<float> C(64);
  EXPECT_THROW(kernels::gemm_lowp(DType::kF32, false, false, 4, 4, 4, 1.0f, A.data(), 4, B.data(),
                                  4, 0.0f, C.data(), DType::kF32, 4),
               Error);
  EXPECT_THROW(kernels::gemm_lowp(DType::kBF16, false, false, 4, 4, 4, 1.0f, A.data(), 4, B.data(),
                                  4, 0.0f, C.data(), DType::kF16, 4),
               Error);
  EXPECT_THROW(kernels::gemm_lowp(DType::kF16, false, false, 4, 4, 4, 1.0f, A.data(), 3, B.data(),
                                  4, 0.0f, C.data(), DType::kF32, 4),
               Error);
}

}  // namespace
}  // namespace kiri
