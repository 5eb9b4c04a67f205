#include "kiri/bench/bench.h"

#include <gtest/gtest.h>

#include "kiri/kernels/peak.h"

namespace kiri::bench {
namespace {

// kiri bench's numbers: the fp32 FMA peak on the bench's threads, or the
// given one, exactly; mfu_gemm over the measured GEMM rate.
TEST(Mfu, BenchUsesTheMeasuredOrTheGivenPeak) {
  BenchSpec s;
  s.name = "small";
  s.model = {2, 2, 32, 256, 32};
  s.batch = 2;
  s.seq = 32;
  s.threads = 1;
  s.warmup_steps = 1;
  s.steps = 2;
  BenchResult r = run_training_bench(s);
  const double fpt = s.model.flops_per_token(s.seq);
  EXPECT_DOUBLE_EQ(r.peak_flops, kernels::peak_flops(DType::kF32, 1));
  EXPECT_GT(r.mfu, 0);
  EXPECT_LE(r.mfu, 1.0);
  EXPECT_NEAR(r.mfu, fpt * r.tokens_per_s / r.peak_flops, 1e-12 * r.mfu);
  EXPECT_NEAR(r.mfu_gemm, fpt * r.tokens_per_s / r.gemm_flops, 1e-12 * r.mfu_gemm);
  s.peak_flops = 1e12;
  r = run_training_bench(s);
  EXPECT_DOUBLE_EQ(r.peak_flops, 1e12);
  EXPECT_NEAR(r.mfu, fpt * r.tokens_per_s / 1e12, 1e-12 * r.mfu);
}

}  // namespace
}  // namespace kiri::bench
