// gemm_lowp (both implementations) against a double reference on the
// 16-bit-rounded inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/kernels/cpu/ops.h"
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

// C is stored [M, ldc] with ldc = N + pad; the padding must stay untouched.
void check_case(const Case& c) {
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
  const double ulp = !lowp_c ? 0.0 : c.ab == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
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
      ASSERT_NEAR(got, ref, ulp * std::abs(ref) + 2e-6 * mag + 1e-30)
          << dtype_name(c.ab) << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N
          << " K=" << c.K << " alpha=" << c.alpha << " beta=" << c.beta << " C "
          << dtype_name(c.c_dtype) << " at " << i << "," << j;
    }
    for (int64_t j = c.N; j < ldc; ++j) {
      const int64_t at = i * ldc + j;
      const double kept = lowp_c ? from_lowp(c.ab, c16[at]) : c32[at];
      ASSERT_EQ(kept, C0.values[at]) << "padding written at " << i << "," << j;
    }
  }
}

void check_all(LowpGemmImpl impl) {
  kernels::set_gemm_lowp_impl(impl);
  for (DType ab : {DType::kBF16, DType::kF16})
    for (DType cd : {DType::kF32, ab})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check_case({ab, ta, tb, 7, 5, 3, 1.0f, 0.0f, cd, 0});
          check_case({ab, ta, tb, 33, 65, 17, 1.0f, 1.0f, cd, 3});
          check_case({ab, ta, tb, 33, 65, 17, 0.5f, 1.0f, cd, 0});
          check_case({ab, ta, tb, 19, 70, 300, -1.5f, 0.0f, cd, 16});
          check_case({ab, ta, tb, 4, 6, 0, 1.0f, 1.0f, cd, 2});  // K = 0: C = beta C
          check_case({ab, ta, tb, 4, 6, 0, 1.0f, 0.0f, cd, 0});
          check_case({ab, ta, tb, 0, 6, 5, 1.0f, 0.0f, cd, 1});
        }
  kernels::set_gemm_lowp_impl(LowpGemmImpl::kAuto);
}

TEST(GemmLowp, ViaF32AllTransposesDtypesAndOddSizes) {
  check_all(LowpGemmImpl::kViaF32);
}

// The oneDNN matmul (with its fallback to the fp32 path where oneDNN has no
// f16 kernel) must meet the same reference.
TEST(GemmLowp, OneDnnMatmulAllTransposesDtypesAndOddSizes) {
  check_all(LowpGemmImpl::kOneDnnMatmul);
}

TEST(GemmLowp, AutoAllTransposesDtypesAndOddSizes) {
  check_all(LowpGemmImpl::kAuto);
}

// Long K (split into blocks on the fp32 path) and a 16-bit C rounded once.
TEST(GemmLowp, LongKAndWidePanels) {
  check_case({DType::kBF16, true, false, 9, 11, 9000, 1.0f, 1.0f, DType::kBF16, 1});
  check_case({DType::kF16, false, true, 3, 70000, 64, 1.0f, 0.0f, DType::kF32, 0});
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
