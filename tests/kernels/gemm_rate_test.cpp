// The GEMM rates (kernels/gemm_rate.h), the one measurement behind kiri train's
// mfu_gemm, kiri bench's GEMM rate and kiri plan --calibrate's.
#include "kiri/kernels/gemm_rate.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

TEST(GemmRate, Fp32AndBf16RatesArePositiveAndFinite) {
  const double fp32 = kiri::kernels::measure_gemm_flops(64, 1);
  const double bf16 = kiri::kernels::measure_gemm_bf16_flops(64, 1);
  EXPECT_GT(fp32, 0);
  EXPECT_TRUE(std::isfinite(fp32));
  EXPECT_GT(bf16, 0);
  EXPECT_TRUE(std::isfinite(bf16));
}

}  // namespace
