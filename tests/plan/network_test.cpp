// The network terms of the time model (docs/planner.md, "Time model"): a group across nodes
// uses its members' NICs, Megatron's pipeline scatter-gather, the fixed per-iteration cost,
// fp32 gradient buffers, FlashAttention in the paper form, cores shared by the ranks, and
// link rates in tc's words. Every expected value is computed by hand from the formulas.
#include <gtest/gtest.h>

#include "kiri/base/error.h"
#include "kiri/plan/layout.h"
#include "kiri/plan/memory.h"
#include "kiri/plan/time.h"

namespace kiri::plan {
namespace {

// A100 nodes: 8 devices, NVLink 300 GB/s and 5 µs inside, a 25 GB/s NIC per device and 10 µs
// across (plan/specs.cpp).
TEST(PlanNetwork, AGroupAcrossNodesUsesTheNicsOfItsMembers) {
  const ClusterSpec c = cluster_preset("a100-80g-nvlink");
  // Inside a node: NVLink.
  EXPECT_EQ(group_link(c, 8, 1).bandwidth, 300e9);
  // dp 16 over 2 nodes: 8 members per node, 8 NICs: min(300, 25 x 8) = 200 GB/s.
  EXPECT_EQ(group_link(c, 16, 1).bandwidth, 200e9);
  EXPECT_EQ(group_link(c, 16, 1).latency, 10e-6);
  // dp 4 at stride tp 4 over 2 nodes: 2 members per node, the node's 4 dp groups share its 8
  // NICs: 2 each, 50 GB/s.
  EXPECT_EQ(group_link(c, 4, 4).bandwidth, 50e9);
  // dp 16 at stride tp 8: one member per node, one NIC: 25 GB/s.
  EXPECT_EQ(group_link(c, 16, 8).bandwidth, 25e9);
  // Faster NICs: capped by NVLink, min(300, 50 x 8).
  ClusterSpec fast = c;
  fast.inter.bandwidth = 50e9;
  EXPECT_EQ(group_link(fast, 16, 1).bandwidth, 300e9);
  // scripts/cluster.sh's hosts: 2 ranks per host and one link per host. Hybrid sharding's
  // replicas (2 members at stride 2) have one member per host and both replica groups of a
  // host cross its one link at once: half of it each. The shard group stays in the host.
  ClusterSpec ns = this_machine_assumed();
  ns.devices_per_node = 2;
  ns.nics_per_node = 1;
  ns.inter = {125e6, 1e-4};
  EXPECT_EQ(group_link(ns, 2, 2).bandwidth, 62.5e6);
  EXPECT_EQ(group_link(ns, 2, 1).bandwidth, ns.intra.bandwidth);
  // ZeRO-3 over all 4: 2 members per host, one group: the whole link.
  EXPECT_EQ(group_link(ns, 4, 1).bandwidth, 125e6);
}

// DDP on 2 nodes of 8 reduces gpt2-1.5B's bf16 gradients at 200 GB/s, not one NIC's 25.
TEST(PlanNetwork, DdpAcrossNodesAllReducesAtTheMembersNics) {
  const ModelSpec m = model_preset("gpt2-1.5B");
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  c.inter.latency = 0;
  Layout l;
  l.dp = 16;
  l.global_batch = 16;
  l.overlap_dp = false;
  l.bucket_mb = 1e6;  // one bucket: no per-bucket latency either
  const double grads = 2 * stage_params(m, 1, 1, 0);
  const TimeBreakdown t = estimate_time(m, l, c);
  EXPECT_DOUBLE_EQ(t.dp_comm_total_s, 2.0 * 15 / 16 * grads / 200e9);
}

TEST(PlanNetwork, PipelineSendsAreScatteredOverTpAndGathered) {
  const ModelSpec m = model_preset("gpt2-350M");  // h 1024, context 1024
  const ClusterSpec c = cluster_preset("a100-80g-nvlink");
  Layout l;
  l.tp = 8;
  l.pp = 2;  // the pp group (stride 8) crosses the nodes: one NIC per member, 25 GB/s
  l.global_batch = 4;
  l.form = ActivationForm::kPaper;
  const double act = 1.0 * 1024 * 1024 * 2;  // b·s·h in bf16
  const double send = 10e-6 + act / 8 / 25e9;
  const double gather = 7 * 5e-6 + 7.0 / 8 * act / 300e9;
  // Two messages (forward, backward) per micro-batch, m = 4.
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).pp_comm_s, 2 * 4 * (send + gather));
  l.sequence_parallel = true;  // the stage starts from its sequence shard: no gather
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).pp_comm_s, 2 * 4 * send);
  l.sequence_parallel = false;
  l.form = ActivationForm::kKiri;  // kiri sends the whole fp32 activation from every tp rank
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).pp_comm_s, 2 * 4 * (10e-6 + 2 * act / 25e9));
}

TEST(PlanNetwork, FixedPerIterationCost) {
  const ModelSpec m = model_preset("gpt2-350M");
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  c.step_overhead_s = 0.004;
  Layout l;
  l.dp = 2;
  l.tp = 2;
  l.pp = 2;
  l.zero_stage = 1;
  l.global_batch = 8;
  const TimeBreakdown t = estimate_time(m, l, c);
  // The norm's scalar all-reduced over tp, pp, the shard group, and the loss over dp: four
  // all-reduces of 4 bytes over 2 ranks in the node.
  const double scalar = 2 * 5e-6 + 4 / 300e9;
  EXPECT_DOUBLE_EQ(t.clip_s, 4 * scalar);
  EXPECT_DOUBLE_EQ(t.overhead_s, 0.004);
  EXPECT_DOUBLE_EQ(t.iteration_s, t.optimizer_s + t.clip_s + t.dp_comm_s + 0.004);
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.bubble_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s +
                                 t.clip_s + t.overhead_s);
}

TEST(PlanNetwork, Fp32GradientBuffersAsMegatron) {
  const ModelSpec m = model_preset("gpt2-1.5B");
  ClusterSpec c = cluster_preset("a100-80g-nvlink");
  c.intra.latency = c.inter.latency = 0;
  Layout l;
  l.dp = 8;
  l.global_batch = 8;
  l.overlap_dp = false;
  const double psi = stage_params(m, 1, 1, 0);
  EXPECT_DOUBLE_EQ(rank_memory(m, l, 0).gradients, 2 * psi);
  const double ddp = estimate_time(m, l, c).dp_comm_total_s;
  l.fp32_grads = true;
  EXPECT_EQ(l.grad_bytes(), 4);
  EXPECT_DOUBLE_EQ(rank_memory(m, l, 0).gradients, 4 * psi);
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).dp_comm_total_s, 2 * ddp);
  // ZeRO-3 gathers the bf16 values twice and reduce-scatters the fp32 gradients: (2 + 2) / 3
  // of the bf16 ZeRO-3's traffic, and stage 2 keeps 4 bytes of gradient per shard element.
  l.zero_stage = 3;
  const double z3_fp32 = estimate_time(m, l, c).dp_comm_total_s;
  l.fp32_grads = false;
  EXPECT_NEAR(z3_fp32 / estimate_time(m, l, c).dp_comm_total_s, 4.0 / 3, 1e-12);
  l.zero_stage = 2;
  l.fp32_grads = true;
  EXPECT_DOUBLE_EQ(rank_memory(m, l, 0).gradients, 4 * psi / 8);
}

// Korthikanti's layer without the s² terms: 34sbh, plus FlashAttention's fp32 log-sum-exp.
TEST(PlanNetwork, FlashAttentionInThePaperForm) {
  const double s = 2048, b = 1, h = 12288, a = 96, sbh = s * b * h;
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 1, false, Recompute::kNone, true),
                   34 * sbh + 4 * a * s * b);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kNone, true),
                   sbh * (10 + 24.0 / 8) + 4 * a * s * b / 8);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, true, Recompute::kNone, true),
                   sbh / 8 * 34 + 4 * a * s * b / 8);
  // Selective and full store no scores either way.
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kSelective, true),
                   korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kSelective));
  // LLaMA: 2as²b/t of scores -> 4asb/t.
  const double kv = 1024, f = 14336;
  EXPECT_DOUBLE_EQ(
      korthikanti_llama_layer_bytes(s, b, 4096, 32, kv, f, 8, false, Recompute::kNone, true),
      korthikanti_llama_layer_bytes(s, b, 4096, 32, kv, f, 8, false, Recompute::kSelective) +
          4 * 32 * s * b / 8);
  // The layout's choice reaches the model: memory and FLOPs (backward recomputes QKᵀ, 2·s·h
  // per token per layer).
  const ModelSpec m = model_preset("gpt3-175B");
  Layout l;
  l.form = ActivationForm::kPaper;
  l.seq_len = 2048;
  l.global_batch = 1;
  EXPECT_EQ(l.attention(), Attention::kStandard);
  const StepFlops standard = step_flops(m, l);
  l.paper_attention = Attention::kFlash;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l, Recompute::kNone),
                   korthikanti_layer_bytes(s, 1, h, a, 1, false, Recompute::kNone, true));
  const StepFlops flash = step_flops(m, l);
  EXPECT_DOUBLE_EQ(flash.model, standard.model);
  EXPECT_DOUBLE_EQ(flash.executed - standard.executed, 2048.0 * 96 * 2 * 2048 * 12288);
  l.form = ActivationForm::kKiri;  // kiri's attention is the flash kind
  l.paper_attention = Attention::kStandard;
  EXPECT_EQ(l.attention(), Attention::kFlash);
  EXPECT_STREQ(name(Attention::kFlash), "flash");
  EXPECT_EQ(parse_attention("standard"), Attention::kStandard);
  EXPECT_THROW(parse_attention("fast"), Error);
}

// The namespace cluster's benchmark run (benchmarks/cluster.sh): data parallel over dp ranks,
// fp32, T 128, 8 sequences per step.
Layout cluster_bench_layout(int dp, int64_t micro_batch) {
  Layout l;
  l.dp = dp;
  l.micro_batch = micro_batch;
  l.seq_len = 128;
  l.global_batch = 8;
  l.dtype = Precision::kFp32;
  return l;
}

// Four ranks on two shared cores compute at half speed.
TEST(PlanNetwork, RanksSharingCoresComputeSlower) {
  const ModelSpec m = model_from_dims(4, 256, 4, 257, 128);
  ClusterSpec c = this_machine_assumed();
  const Layout l = cluster_bench_layout(4, 2);
  const TimeBreakdown alone = estimate_time(m, l, c);
  c.shared_cores = 2;
  const TimeBreakdown shared = estimate_time(m, l, c);
  EXPECT_DOUBLE_EQ(shared.compute_slowdown, 2);
  EXPECT_DOUBLE_EQ(shared.stage_s[0], 2 * alone.stage_s[0]);
  EXPECT_DOUBLE_EQ(shared.optimizer_s, 2 * alone.optimizer_s);
  c.shared_cores = 4;
  EXPECT_DOUBLE_EQ(estimate_time(m, l, c).compute_s, alone.compute_s);
}

// A transfer hidden behind compute still takes a share of it where the cores carry it
// (ClusterSpec::transfer_compute_share): the hidden time is dp_comm_total_s less what is
// exposed without the share, and the step grows by the share of it. Collectives inside a
// CPU node run on the cores already (nothing hidden), and without overlap nothing changes.
TEST(PlanNetwork, AHiddenTransferTakesItsShareOfTheCompute) {
  const ModelSpec m = model_from_dims(4, 256, 4, 257, 128);
  ClusterSpec c = this_machine_assumed();
  c.nodes = 2;
  c.devices_per_node = 1;
  c.nics_per_node = 1;
  c.inter = {250e6, 1e-4};
  for (int stage : {0, 2, 3}) {
    Layout l = cluster_bench_layout(2, 4);
    l.zero_stage = stage;
    l.bucket_mb = 0.25;
    c.transfer_compute_share = 0;
    const TimeBreakdown free = estimate_time(m, l, c);
    const double hidden = free.dp_comm_total_s - free.dp_comm_s;
    ASSERT_GT(hidden, 0) << "stage " << stage;
    EXPECT_EQ(free.dp_comm_cpu_s, 0);
    c.transfer_compute_share = 0.25;
    const TimeBreakdown charged = estimate_time(m, l, c);
    EXPECT_NEAR(charged.dp_comm_cpu_s, 0.25 * hidden, 1e-15) << "stage " << stage;
    EXPECT_NEAR(charged.dp_comm_s, free.dp_comm_s + 0.25 * hidden, 1e-15);
    EXPECT_NEAR(charged.step_s, free.step_s + 0.25 * hidden, 1e-12);
    l.overlap_dp = false;
    EXPECT_EQ(estimate_time(m, l, c).dp_comm_cpu_s, 0);
  }
  // One node: a CPU node's collectives run on the cores (none hidden), so no share is added.
  ClusterSpec one = this_machine_assumed();
  one.transfer_compute_share = 0.25;
  EXPECT_EQ(estimate_time(m, cluster_bench_layout(2, 4), one).dp_comm_cpu_s, 0);
}

TEST(PlanNetwork, LinkRatesAndTimesAsTcWritesThem) {
  EXPECT_DOUBLE_EQ(parse_link_rate("1gbit", "inter-bandwidth"), 125e6);
  EXPECT_DOUBLE_EQ(parse_link_rate("200mbit", "inter-bandwidth"), 25e6);
  EXPECT_DOUBLE_EQ(parse_link_rate("300e9", "inter-bandwidth"), 300e9);
  EXPECT_DOUBLE_EQ(parse_link_rate("2gbps", "inter-bandwidth"), 2e9);
  EXPECT_DOUBLE_EQ(parse_link_rate("8kibit", "inter-bandwidth"), 1024);
  EXPECT_DOUBLE_EQ(parse_link_rate("800bit", "inter-bandwidth"), 100);
  EXPECT_DOUBLE_EQ(parse_seconds("5ms", "inter-latency"), 5e-3);
  EXPECT_DOUBLE_EQ(parse_seconds("20us", "inter-latency"), 20e-6);
  EXPECT_DOUBLE_EQ(parse_seconds("1e-5", "inter-latency"), 1e-5);
  EXPECT_DOUBLE_EQ(parse_seconds("0", "step-overhead"), 0);
  for (const char* bad : {"fast", "1gbits", "-1gbit", "0mbit", "1xbit", ""}) {
    try {
      parse_link_rate(bad, "inter-bandwidth");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad;
      EXPECT_NE(e.message().find("--inter-bandwidth"), std::string::npos) << e.message();
    }
  }
  for (const char* bad : {"5 parsecs", "-1ms", "ms"})
    EXPECT_THROW(parse_seconds(bad, "inter-latency"), Error) << bad;
}

}  // namespace
}  // namespace kiri::plan
