#include "kiri/bench/bench.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiri/base/error.h"
#include "kiri/kernels/bandwidth.h"
#include "kiri/kernels/peak.h"

namespace kiri::bench {
namespace {

// A small model's bench on 1 thread, 1 warm-up and 2 timed steps.
BenchSpec small_spec(const kiri::GPTConfig& model, int64_t batch, int64_t seq) {
  BenchSpec s;
  s.name = "small";
  s.model = model;
  s.batch = batch;
  s.seq = seq;
  s.threads = 1;
  s.warmup_steps = 1;
  s.steps = 2;
  return s;
}

// kiri bench's numbers: the fp32 FMA peak on the bench's threads, or the
// given one, exactly; mfu_gemm over the measured GEMM rate.
TEST(Mfu, BenchUsesTheMeasuredOrTheGivenPeak) {
  BenchSpec s = small_spec({2, 2, 32, 256, 32}, 2, 32);
  BenchResult r = run_training_bench(s);
  const double fpt = s.model.flops_per_token(s.seq);
  EXPECT_DOUBLE_EQ(r.peak_flops, kernels::peak_flops(DType::kF32, 1));
  EXPECT_EQ(r.peak_instruction, kernels::core_peak(DType::kF32).instruction);
  EXPECT_TRUE(r.gemm_lowp.empty());
  EXPECT_GT(r.step_over_gemms, 0.5);
  EXPECT_GT(r.mfu, 0);
  EXPECT_LE(r.mfu, 1.0);
  EXPECT_NEAR(r.mfu, fpt * r.tokens_per_s / r.peak_flops, 1e-12 * r.mfu);
  EXPECT_NEAR(r.mfu_gemm, fpt * r.tokens_per_s / r.gemm_flops, 1e-12 * r.mfu_gemm);
  // The memory-bound columns: rates, and the optimizer's share of a step.
  EXPECT_GT(r.memory_bandwidth, 1e8);
  EXPECT_GT(r.adamw_bandwidth, 1e8);
  EXPECT_GT(r.optimizer_s, 0);
  EXPECT_LT(r.optimizer_s, r.step_s);
  s.peak_flops = 1e12;
  r = run_training_bench(s);
  EXPECT_DOUBLE_EQ(r.peak_flops, 1e12);
  EXPECT_EQ(r.peak_instruction, "given");
  EXPECT_NEAR(r.mfu, fpt * r.tokens_per_s / 1e12, 1e-12 * r.mfu);
}

// A 16-bit bench: the step in that dtype, its GEMMs replayed on the path gemm_lowp chose, MFU
// against that dtype's peak, which the result names. Sane values on a small model.
TEST(Mfu, SixteenBitBenchUsesItsDtypesPeakAndReplaysItsGemms) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    BenchSpec s = small_spec({2, 2, 64, 512, 64}, 4, 64);
    s.dtype = dt;
    const BenchResult r = run_training_bench(s);
    const double fpt = s.model.flops_per_token(s.seq);
    EXPECT_DOUBLE_EQ(r.peak_flops, kernels::peak_flops(dt, 1));
    EXPECT_EQ(r.peak_instruction, kernels::core_peak(dt).instruction);
    EXPECT_FALSE(r.peak_instruction.empty());
    EXPECT_FALSE(r.gemm_lowp.empty());  // the path's description
    EXPECT_TRUE(std::isfinite(r.mfu) && r.mfu > 0 && r.mfu <= 1) << r.mfu;
    EXPECT_NEAR(r.mfu, fpt * r.tokens_per_s / r.peak_flops, 1e-12 * r.mfu);
    EXPECT_TRUE(std::isfinite(r.loss_last)) << r.loss_last;
    EXPECT_GT(r.gemm_step_s, 0);
    // The step does its GEMMs and more; half of them would mean a replay that does too much.
    EXPECT_GT(r.step_over_gemms, 0.5);
    EXPECT_TRUE(std::isfinite(r.step_over_gemms));
  }
}

TEST(Mfu, BenchRefusesANonFloatDtype) {
  BenchSpec s = bench_preset("tiny");
  s.dtype = DType::kI32;
  EXPECT_THROW(run_training_bench(s), Error);
}

TEST(AdamWBandwidth, BytesPerElementOfEachDtype) {
  EXPECT_EQ(adamw_bytes_per_element(DType::kF32, false), 28);
  EXPECT_EQ(adamw_bytes_per_element(DType::kF32, true), 32);
  EXPECT_EQ(adamw_bytes_per_element(DType::kBF16, false), 28);
  EXPECT_EQ(adamw_bytes_per_element(DType::kF16, true), 30);
}

// Issue 28's goal for the update: at least 80% of the memory bandwidth. AdamW over arrays
// together as large as the triad's (both beyond the last-level cache), on one thread and on
// two, measured alternately (the best of each over two rounds) so that a busy spell on a
// shared machine hits both; up to 3 attempts.
TEST(AdamWBandwidthTiming, UpdateMovesItsBytesAtEightyPercentOfTheTriad) {
  const int64_t array_bytes = kernels::default_bandwidth_array_bytes();
  // AdamW's four fp32 arrays (param, gradient, m, v) span the triad's two.
  const int64_t n = array_bytes / 8;
  for (int threads : {1, 2}) {
    double ratio = 0;
    std::string seen;
    for (int attempt = 1; attempt <= 3 && ratio < 0.8; ++attempt) {
      const MemoryRates r = measure_memory_rates(n, DType::kF32, threads, array_bytes);
      ratio = r.adamw / r.memory;
      seen += " " + std::to_string(r.adamw / 1e9) + "/" + std::to_string(r.memory / 1e9) + " GB/s;";
    }
    EXPECT_GE(ratio, 0.8) << threads << " threads, AdamW/triad:" << seen;
  }
}

}  // namespace
}  // namespace kiri::bench
