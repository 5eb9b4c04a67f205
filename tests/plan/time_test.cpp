// The time model: FLOPs per step, the bubble, the α–β collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiri/base/error.h"
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
  EXPECT_EQ(l.step_microbatches(), 8);
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
  l.activation_checkpointing = Recompute::kFull;
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
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.bubble_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s +
                                 t.clip_s + t.overhead_s);
  EXPECT_GT(t.clip_s, 0);
  EXPECT_DOUBLE_EQ(t.bubble_fraction, 1.0 / 9);
  ASSERT_EQ(t.stage_s.size(), 2u);
  const double slow = std::max(t.stage_s[0], t.stage_s[1]);
  EXPECT_DOUBLE_EQ(t.compute_s, 8 * slow + t.optimizer_s);
  // (m − 1)·max + Σ: the bubble is the other stage's micro-batch.
  EXPECT_DOUBLE_EQ(t.bubble_s, std::min(t.stage_s[0], t.stage_s[1]));
  EXPECT_GT(t.optimizer_s, 0);
  EXPECT_GT(t.tp_comm_s, 0);
  EXPECT_GT(t.pp_comm_s, 0);
  EXPECT_GT(t.mfu, 0);
  EXPECT_LT(t.mfu, c.efficiency);
  EXPECT_DOUBLE_EQ(t.tokens_per_s, 32.0 * 1024 / t.step_s);
  EXPECT_DOUBLE_EQ(t.tflops_per_device, t.flops_per_step / 8 / t.step_s / 1e12);
}

// Collectives on the computing cores (CPU ranks) hide behind nothing.
TEST(PlanTime, ClustersWhoseCollectivesShareTheCoresExposeThem) {
  const ModelSpec m = model_preset("gpt2-124M");
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  Layout l;
  l.dp = 8;
  l.global_batch = 64;
  const TimeBreakdown hidden = estimate_time(m, l, c);
  EXPECT_LT(hidden.dp_comm_s, hidden.dp_comm_total_s);
  c.comm_overlaps_compute = false;
  const TimeBreakdown exposed = estimate_time(m, l, c);
  EXPECT_DOUBLE_EQ(exposed.dp_comm_s, exposed.dp_comm_total_s);
  EXPECT_FALSE(this_machine_assumed().comm_overlaps_compute);
}

// Without non-GEMM costs, one stage's compute is the executed FLOPs at peak · efficiency.
TEST(PlanTime, WithoutNonGemmWorkComputeIsFlopsOverRate) {
  const ModelSpec m = model_from_dims(12, 768, 12, 50304);  // V a multiple of tp: no padding
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  c.non_gemm = {};
  Layout l;
  l.dp = 4;
  l.tp = 2;
  l.global_batch = 16;
  const TimeBreakdown t = estimate_time(m, l, c);
  EXPECT_NEAR(t.compute_s, t.flops_per_step / 8 / (c.flops_16bit * c.efficiency),
              t.compute_s * 1e-12);
  EXPECT_EQ(t.optimizer_s, 0);
}

// The non-GEMM terms by hand: one process, GPT-2 dims, fp32. tp 1 trains with the one-pass loss
// (logit_s), and at ZeRO stage 0 the update zeroes the gradients it reads
// (optimizer_zeroing_s): no zeroing pass of its own, the norm's read apart.
TEST(PlanTime, NonGemmTermsByHand) {
  const ModelSpec m = model_from_dims(2, 64, 4, 1000, 1024);
  ClusterSpec c = this_machine_assumed();
  c.non_gemm = {1e-9, 2e-9, 3e-9, 4e-9, 5e-9, 6e-9, 7e-9};
  Layout l;
  l.dtype = Precision::kFp32;
  l.micro_batch = 2;
  l.global_batch = 4;  // m = 2
  l.seq_len = 32;
  const TimeBreakdown with = estimate_time(m, l, c);
  c.non_gemm = {};
  const TimeBreakdown without = estimate_time(m, l, c);
  const double tokens = 4 * 32, params = stage_params(m, 1, 1, 0);
  EXPECT_NEAR(with.compute_s - without.compute_s,
              tokens * (1000 * 1e-9 + 2 * 64 * 2e-9) + params * (6e-9 + 4e-9), 1e-15);
  EXPECT_NEAR(with.optimizer_s, params * (6e-9 + 4e-9), 1e-15);
}

// Under tensor parallelism the loss is the vocab-parallel pair (forward and backward apart,
// 16 bytes a logit): logit_split_s per logit of the rank's V/tp columns, and logit_s unused.
TEST(PlanTime, TensorParallelLossIsTheSplitPair) {
  const ModelSpec m = model_from_dims(2, 64, 4, 1000, 1024);
  ClusterSpec c = this_machine_assumed();
  Layout l;
  l.dtype = Precision::kFp32;
  l.tp = 2;
  l.micro_batch = 2;
  l.global_batch = 2;
  l.seq_len = 32;
  c.non_gemm = {};
  const double base = estimate_time(m, l, c).stage_s.at(0);
  c.non_gemm.logit_s = 1e-9;
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).stage_s.at(0), base);
  c.non_gemm.logit_split_s = 5e-9;
  EXPECT_NEAR(estimate_time(m, l, c).stage_s.at(0) - base, 2 * 32 * 500 * 5e-9, 1e-15);
  l.tp = 1;  // the one-pass loss again: logit_s over all 1000 columns
  c.non_gemm.logit_split_s = 0;
  const double one = estimate_time(m, l, c).stage_s.at(0);
  c.non_gemm.logit_s = 0;
  EXPECT_NEAR(one - estimate_time(m, l, c).stage_s.at(0), 2 * 32 * 1000 * 1e-9, 1e-15);
  EXPECT_EQ(kLogitBytes, 8);  // the row read once, dlogits written once
  EXPECT_EQ(kSplitLogitBytes, 16);
}

// Where the step zeroes the gradients in a pass of its own (train/step.cpp): not at stage 0
// with the optimizer in memory (any dp, tp, pp), the whole Ψ at stage 0 under optimizer
// offload and at stage 1, the shard from stage 2, nothing when the shards live on NVMe. The
// norm reads the optimizer's elements throughout.
TEST(PlanTime, GradientZeroingIsChargedWhereTheStepZeroesApart) {
  struct Row {
    int zero, group;
    bool offload_optimizer, offload_grads;
    double updated, zeroed;
    bool fused;
  };
  const std::vector<Row> rows = {
      {0, 0, false, false, 1200, 0, true},    {0, 0, true, false, 1200, 1200, false},
      {1, 0, false, false, 300, 1200, false}, {1, 0, true, false, 300, 1200, false},
      {2, 0, false, false, 300, 300, false},  {3, 0, false, false, 300, 300, false},
      {3, 0, true, true, 300, 0, false},      {2, 0, true, true, 300, 0, false},
      {3, 2, false, false, 600, 600, false},  // hybrid: shards of 2
  };
  for (const Row& r : rows) {
    Layout l;
    l.dp = 4;
    l.zero_stage = r.zero;
    l.shard_group_size = r.group;
    if (r.offload_optimizer) l.offload.optimizer = OffloadTarget::kNvme;
    if (r.offload_grads) l.offload.gradients = OffloadTarget::kNvme;
    const GradientWork g = gradient_work(l, 1200);
    const std::string where =
        str("zero ", r.zero, " group ", r.group, " offload ", r.offload_optimizer, r.offload_grads);
    EXPECT_DOUBLE_EQ(g.updated, r.updated) << where;
    EXPECT_DOUBLE_EQ(g.norm, r.updated) << where;
    EXPECT_DOUBLE_EQ(g.zeroed, r.zeroed) << where;
    EXPECT_EQ(g.fused, r.fused) << where;
  }
  Layout l;  // tp, pp and accumulation keep stage 0's fused zeroing
  l.dp = 2;
  l.tp = 2;
  l.pp = 2;
  EXPECT_TRUE(gradient_work(l, 1200).fused);
  EXPECT_DOUBLE_EQ(gradient_work(l, 1200).zeroed, 0);
}

// The step's optimizer term from gradient_work: ZeRO-1 on 4 ranks updates and reads the norm
// of a quarter and zeroes the whole gradient; the bandwidth model's bytes per element.
TEST(PlanTime, OptimizerTermChargesTheZeroingPass) {
  const ModelSpec m = model_from_dims(2, 64, 4, 1000, 1024);
  ClusterSpec c = this_machine_assumed();
  c.non_gemm = {0, 0, 3e-9, 4e-9, 0, 6e-9, 7e-9};
  Layout l;
  l.dtype = Precision::kFp32;
  l.dp = 4;
  l.zero_stage = 1;
  l.seq_len = 32;
  l.global_batch = 4;
  const double params = stage_params(m, 1, 1, 0);
  EXPECT_NEAR(estimate_time(m, l, c).optimizer_s, params / 4 * (3e-9 + 4e-9) + params * 7e-9,
              1e-15);
  l.zero_stage = 0;
  EXPECT_NEAR(estimate_time(m, l, c).optimizer_s, params * (6e-9 + 4e-9), 1e-15);
  const NonGemmCosts b = non_gemm_from_bandwidth(1e9);
  EXPECT_DOUBLE_EQ(b.optimizer_s, 28e-9);
  EXPECT_DOUBLE_EQ(b.optimizer_zeroing_s, 32e-9);  // + the gradient written back as 0
  EXPECT_DOUBLE_EQ(b.gradient_s, 4e-9);
  EXPECT_DOUBLE_EQ(b.zeroing_s, 4e-9);
  EXPECT_DOUBLE_EQ(b.logit_s, 8e-9);
  EXPECT_DOUBLE_EQ(b.logit_split_s, 16e-9);
}

// kiri's pipeline cut (FLOPs, head on the last stage) and Megatron's even one.
TEST(PlanTime, PipelineChunks) {
  // The bench's tiny config: the head (2hV = 25.7 M per token) outweighs 4 blocks of 1.7 M.
  const ModelSpec tiny = model_from_dims(4, 256, 4, 50257, 1024);
  Layout l;
  l.pp = 2;
  l.seq_len = 128;
  l.global_batch = 4;
  std::vector<StageBlocks> k = pipeline_chunks(tiny, l);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].first, 0);
  EXPECT_EQ(k[0].end, 3);
  EXPECT_EQ(k[1].end, 4);
  l.form = ActivationForm::kPaper;
  k = pipeline_chunks(tiny, l);
  EXPECT_EQ(k[0].end, 2);
  // Interleaved: pp·v chunks of a model without a heavy head, even.
  const ModelSpec big = model_preset("gpt3-175B");
  l.form = ActivationForm::kKiri;
  l.pp = 4;
  l.schedule = Schedule::kInterleaved;
  l.virtual_stages = 2;
  l.seq_len = 2048;
  l.global_batch = 8;
  k = pipeline_chunks(big, l);
  ASSERT_EQ(k.size(), 8u);
  EXPECT_EQ(k.back().end, 96);
  for (const StageBlocks& b : k) EXPECT_NEAR(static_cast<double>(b.end - b.first), 12, 1);
  // Given facts win.
  KiriLayoutFacts f;
  f.stages = {{0, 1}, {1, 4}};
  l = Layout{};
  l.pp = 2;
  EXPECT_EQ(pipeline_chunks(tiny, l, f)[0].end, 1);
  // Unequal stages: the step is (m − 1)·max + Σ.
  l.seq_len = 128;
  l.global_batch = 4;
  const TimeBreakdown t = estimate_time(tiny, l, this_machine_assumed());
  ASSERT_EQ(t.stage_s.size(), 2u);
  EXPECT_GT(t.stage_s[1], 3 * t.stage_s[0]);
  EXPECT_DOUBLE_EQ(t.bubble_s, t.stage_s[0]);
  EXPECT_DOUBLE_EQ(t.compute_s, 4 * t.stage_s[1] + t.optimizer_s);
}

}  // namespace
}  // namespace kiri::plan
