// The time model: FLOPs per step, the bubble, the α–β collectives.
#include <gtest/gtest.h>

#include "kiri/plan/layout.h"
#include "kiri/plan/time.h"

namespace kiri::plan {
namespace {

TEST(PlanTime, GlobalBatchIsMicroBatchTimesAccumulationTimesDp) {
  EXPECT_EQ(global_batch(4, 8, 16), 512);
  Layout l;
  l.dp = 16;
  l.micro_batch = 4;
  l.global_batch = 512;
  EXPECT_EQ(l.microbatches(), 8);
}

TEST(PlanTime, NarayananFormulaByHand) {
  // GPT-2 124M, one sequence of 1024: 72·1024·12·768²·(1 + 1024/4608 + 50257/110592).
  const double base = 72.0 * 1024 * 12 * 768 * 768;
  EXPECT_DOUBLE_EQ(base, 521838526464.0);
  EXPECT_DOUBLE_EQ(narayanan_flops(1, 1024, 12, 768, 50257, false),
                   base * (1 + 1024.0 / 4608 + 50257.0 / 110592));
  EXPECT_DOUBLE_EQ(narayanan_flops(1, 1024, 12, 768, 50257, true),
                   96.0 * 1024 * 12 * 768 * 768 * (1 + 1024.0 / 4608 + 50257.0 / 147456));
  EXPECT_DOUBLE_EQ(six_n_flops(124e6, 1e6), 7.44e14);
}

TEST(PlanTime, StepFlopsAreNarayanansForGpt) {
  const ModelSpec m = model_preset("gpt3-175B");
  Layout l;
  l.form = ActivationForm::kPaper;
  l.global_batch = 1536;
  l.seq_len = 2048;
  StepFlops f = step_flops(m, l);
  EXPECT_NEAR(f.model / narayanan_flops(1536, 2048, 96, 12288, 50257, false), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(f.executed, f.model);
  l.recompute = Recompute::kFull;
  f = step_flops(m, l);
  EXPECT_NEAR(f.executed / narayanan_flops(1536, 2048, 96, 12288, 50257, true), 1.0, 1e-12);
  EXPECT_NEAR(f.model / narayanan_flops(1536, 2048, 96, 12288, 50257, false), 1.0, 1e-12);
}

TEST(PlanTime, BubbleFormulas) {
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8), 3.0 / 11);
  EXPECT_DOUBLE_EQ(bubble_fraction(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8, 2), 3.0 / 19);
  EXPECT_DOUBLE_EQ(bubble_overhead(4, 8), 3.0 / 8);
  EXPECT_DOUBLE_EQ(bubble_overhead(4, 8, 2), 3.0 / 16);
}

TEST(PlanTime, CollectivesAlphaBeta) {
  const Link link{100e9, 1e-5};
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e9, 1, link), 0);
  EXPECT_DOUBLE_EQ(allreduce_seconds(1e9, 4, link), 6 * 1e-5 + 1.5 * 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(1e9, 4, link), 3 * 1e-5 + 0.75 * 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 4, link), reduce_scatter_seconds(1e9, 4, link));
  EXPECT_DOUBLE_EQ(p2p_seconds(1e9, link), 1e-5 + 0.01);
  const ClusterSpec c = cluster_preset("a100-80g-nvlink");
  EXPECT_EQ(group_link(c, 8).bandwidth, c.intra.bandwidth);
  EXPECT_EQ(group_link(c, 16).bandwidth, c.inter.bandwidth);
}

TEST(PlanTime, Zero3MovesOneAndAHalfTimesDdp) {
  const ModelSpec m = model_preset("gpt2-1.5B");
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  c.intra.latency = c.inter.latency = 0;
  Layout l;
  l.dp = 8;
  l.global_batch = 8;
  l.overlap_dp = false;
  const double ddp = estimate_time(m, l, c).dp_comm_total_s;
  l.zero_stage = 3;
  EXPECT_NEAR(estimate_time(m, l, c).dp_comm_total_s / ddp, 1.5, 1e-9);
  l.zero_stage = 1;
  EXPECT_NEAR(estimate_time(m, l, c).dp_comm_total_s / ddp, 1.0, 1e-9);
}

TEST(PlanTime, StepTimeAddsUpAndMfuIsBelowEfficiency) {
  const ModelSpec m = model_preset("gpt2-350M");
  const ClusterSpec c = cluster_preset("a100-80g-nvlink");
  Layout l;
  l.dp = 2;
  l.tp = 2;
  l.pp = 2;
  l.micro_batch = 2;
  l.global_batch = 32;
  const TimeBreakdown t = estimate_time(m, l, c);
  ASSERT_TRUE(t.estimated);
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.bubble_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 1.0 / 9);
  EXPECT_DOUBLE_EQ(t.bubble_s, t.compute_s / 8);
  EXPECT_GT(t.tp_comm_s, 0);
  EXPECT_GT(t.pp_comm_s, 0);
  EXPECT_GT(t.mfu, 0);
  EXPECT_LT(t.mfu, c.efficiency);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 32.0 * 1024 / t.step_s);
  EXPECT_DOUBLE_EQ(t.tflops_per_device, t.flops_per_step / 8 / t.step_s / 1e12);
}

}  // namespace
}  // namespace kiri::plan
