// The planner's recommendation and its validation.
#include <gtest/gtest.h>

#include <vector>

#include "kiri/base/error.h"
#include "kiri/plan/planner.h"

namespace kiri::plan {
namespace {

PlanRequest request(const std::string& model, const std::string& cluster, int world,
                    int64_t micro_batch = 1) {
  PlanRequest r{model_preset(model), cluster_preset(cluster), world, Layout{}};
  r.base.micro_batch = micro_batch;
  r.base.seq_len = r.model.max_seq;
  r.base.global_batch = 512;
  return r;
}

TEST(PlanRecommend, Llama7BOnOneA100NeedsZeroForItsStates) {
  PlanRequest r = request("llama-7B", "a100-80g-nvlink", 1);
  r.offload_if_needed = false;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  ASSERT_FALSE(cs.empty());
  const Recommendation rec = recommend(r, cs);
  EXPECT_EQ(rec.bottleneck, "model_states");
  EXPECT_EQ(rec.cut, "zero");
  EXPECT_FALSE(rec.best.has_value());
  EXPECT_EQ(rec.min_devices, 2);
  EXPECT_NE(rec.message.find("ZeRO/FSDP"), std::string::npos) << rec.message;
  // Allowed to offload, one device trains it with the optimizer states on NVMe
  // (ZeRO-Offload's case), and the message still names the devices ZeRO would need.
  r.offload_if_needed = true;
  const Recommendation off = recommend(r, enumerate_layouts(r));
  ASSERT_TRUE(off.best.has_value()) << off.message;
  EXPECT_EQ(off.bottleneck, "model_states");
  EXPECT_EQ(off.cut, "offload");
  EXPECT_EQ(off.best->layout.offload.optimizer, OffloadTarget::kNvme);
  EXPECT_EQ(off.min_devices, 2);
  EXPECT_NE(off.message.find("ZeRO/FSDP"), std::string::npos) << off.message;
}

TEST(PlanRecommend, Llama7BOnEightA100sShards) {
  const PlanRequest r = request("llama-7B", "a100-80g-nvlink", 8);
  const Recommendation rec = recommend(r, enumerate_layouts(r));
  EXPECT_EQ(rec.bottleneck, "model_states");
  EXPECT_EQ(rec.cut, "zero");
  ASSERT_TRUE(rec.best.has_value());
  EXPECT_TRUE(rec.best->fits);
  const Layout& l = rec.best->layout;
  EXPECT_TRUE(l.zero_stage > 0 || l.tp > 1 || l.pp > 1) << l.str();
}

// GPT-3 on 64 nodes of 8 H100s that share one 400 Gb/s NIC per node: the states need
// sharding, but ZeRO over 512 ranks gathers every one of 96 layers through that NIC;
// pipeline stages win: too many layers. (With the preset's NIC per device, ZeRO-3's gathers
// leave a node through all 8 NICs, 400 GB/s, and sharding alone wins: below.)
TEST(PlanRecommend, Gpt3On64H100NodesCutsTheLayers) {
  PlanRequest r = request("gpt3-175B", "h100-80g-nvlink-ib", 512);
  r.cluster.nics_per_node = 1;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  const Recommendation rec = recommend(r, cs);
  EXPECT_EQ(rec.bottleneck, "layers") << rec.message;
  EXPECT_EQ(rec.cut, "pipeline_parallel");
  ASSERT_TRUE(rec.best.has_value());
  EXPECT_GT(rec.best->layout.pp, 1);
  // The fastest layout without stages is much slower (the message quotes it).
  for (const Evaluation& e : cs)
    if (e.fits && e.layout.pp == 1) {
      EXPECT_GT(e.time.step_s, 1.5 * rec.best->time.step_s);
      break;
    }
  EXPECT_NE(rec.message.find("too many for sharding alone"), std::string::npos) << rec.message;
  // A NIC per device: the dp group's 8 members per node use 8 NICs, and ZeRO-3 over all 512
  // ranks is the fastest layout.
  r.cluster.nics_per_node = 0;
  const Recommendation all_nics = recommend(r, enumerate_layouts(r));
  EXPECT_EQ(all_nics.cut, "zero") << all_nics.message;
  ASSERT_TRUE(all_nics.best.has_value());
  EXPECT_EQ(all_nics.best->layout.pp, 1);
  EXPECT_LT(all_nics.best->time.step_s, rec.best->time.step_s);
}

// The headline's cut is one the recommended layout makes, whatever the model and cluster.
TEST(PlanRecommend, TheHeadlineCutIsOneTheLayoutMakes) {
  struct Ask {
    const char* model;
    const char* cluster;
    int world;
    int64_t micro_batch;
  };
  for (const Ask& q : std::vector<Ask>{{"gpt2-124M", "a100-80g-nvlink", 8, 1},
                                       {"gpt2-1.5B", "a100-80g-nvlink", 8, 16},
                                       {"gpt2-1.5B", "v100-32g-pcie", 16, 4},
                                       {"llama-7B", "a100-80g-nvlink", 8, 1},
                                       {"llama-7B", "a100-80g-nvlink", 16, 1},
                                       {"llama-13B", "v100-32g-pcie", 32, 1},
                                       {"gpt3-175B", "h100-80g-nvlink-ib", 512, 1}}) {
    const PlanRequest r = request(q.model, q.cluster, q.world, q.micro_batch);
    const Recommendation rec = recommend(r, enumerate_layouts(r));
    ASSERT_TRUE(rec.best.has_value()) << q.model << " on " << q.world;
    const Layout& l = rec.best->layout;
    const bool makes =
        (rec.cut == "data_parallel" && l.dp > 1) || (rec.cut == "zero" && l.zero_stage > 0) ||
        (rec.cut == "tensor_parallel" && l.tp > 1) ||
        (rec.cut == "pipeline_parallel" && l.pp > 1) ||
        (rec.cut == "checkpointing" && l.activation_checkpointing != Recompute::kNone);
    EXPECT_TRUE(makes) << q.model << " on " << q.world << " x " << q.cluster << ": " << rec.cut
                       << " but " << l.str() << "\n"
                       << rec.message;
  }
}

TEST(PlanRecommend, Gpt2SmallOnEightA100sIsDataParallel) {
  const PlanRequest r = request("gpt2-124M", "a100-80g-nvlink", 8);
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  const Recommendation rec = recommend(r, cs);
  EXPECT_EQ(rec.bottleneck, "compute");
  EXPECT_EQ(rec.cut, "data_parallel");
  ASSERT_TRUE(rec.best.has_value());
  EXPECT_EQ(rec.best->layout.dp, 8);
  EXPECT_EQ(rec.best->layout.tp, 1);
  EXPECT_EQ(rec.best->layout.pp, 1);
  EXPECT_EQ(rec.reasons.size(), 1u);
  // Sorted: fitting layouts first, by step time.
  for (size_t i = 1; i < cs.size(); ++i)
    if (cs[i].fits) {
      ASSERT_TRUE(cs[i - 1].fits);
      EXPECT_LE(cs[i - 1].time.step_s, cs[i].time.step_s);
    }
}

TEST(PlanRecommend, BigMicroBatchesNeedCheckpointing) {
  // b 32: 133 GiB of bf16 activations per rank (at b 16 kiri's bf16 form, 66 GiB, fits beside
  // ZeRO-1's states).
  const PlanRequest r = request("gpt2-1.5B", "a100-80g-nvlink", 8, 32);
  const Recommendation rec = recommend(r, enumerate_layouts(r));
  EXPECT_EQ(rec.bottleneck, "activations");
  ASSERT_TRUE(rec.best.has_value());
  // Recomputation, or a cut that also shrinks each device's activations and is faster here
  // (pipeline stages hold fewer layers'), said so with the recomputing layout's time.
  if (rec.cut != "checkpointing") {
    EXPECT_TRUE(rec.cut == "pipeline_parallel" || rec.cut == "tensor_parallel") << rec.cut;
    EXPECT_NE(rec.message.find("the fastest with checkpointing"), std::string::npos) << rec.message;
  }
}

TEST(PlanRecommend, ALayerTooBigForADeviceNeedsTensorParallel) {
  PlanRequest r = request("gpt3-175B", "a100-80g-nvlink", 8);
  r.cluster.memory_bytes = 4.0 * 1024 * 1024 * 1024;
  const Recommendation rec = recommend(r, enumerate_layouts(r));
  EXPECT_EQ(rec.bottleneck, "layer");
  EXPECT_EQ(rec.cut, "tensor_parallel");
}

TEST(PlanRecommend, ParamsOnlyModelsPlanStatesOnly) {
  PlanRequest r{model_from_params(7.5e9), cluster_preset("a100-80g-nvlink"), 64, Layout{}};
  r.base.global_batch = 64;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  ASSERT_EQ(cs.size(), 4u);  // dp 64, ZeRO 0-3
  for (const Evaluation& e : cs) {
    EXPECT_FALSE(e.time.estimated);
    EXPECT_EQ(e.memory.memory.activations, 0);
  }
  EXPECT_EQ(cs.front().layout.zero_stage, 3);  // the smallest first (time unknown)
  EXPECT_NEAR(cs.front().memory.memory.total() / 1e9, 1.9, 0.05);
}

TEST(PlanValidate, NamedConfigErrors) {
  const ModelSpec m = model_preset("gpt2-124M");
  const ClusterSpec c = cluster_preset("a100-80g-nvlink");
  auto kind_of = [&](Layout l) {
    try {
      evaluate(m, l, c);
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInternal;
  };
  Layout l;
  l.global_batch = 8;
  l.tp = 5;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // 5 does not divide 12 heads
  l.tp = 1;
  l.pp = 13;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // more stages than layers
  l.pp = 2;
  l.zero_stage = 3;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // pp > 1 with stage 3
  l.zero_stage = 0;
  l.dp = 3;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // 8 not a multiple of 3
  l.dp = 1;
  l.seq_len = 2048;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // beyond GPT-2's 1024 positions
  l.seq_len = 1024;
  l.schedule = Schedule::kInterleaved;
  l.virtual_stages = 2;
  l.global_batch = 3;
  EXPECT_EQ(kind_of(l), ErrorKind::kConfig);  // m = 3 not a multiple of pp 2
  EXPECT_THROW(model_preset("gpt5"), Error);
  EXPECT_THROW(cluster_preset("tpu"), Error);
  EXPECT_THROW(parse_recompute("some"), Error);
  l.global_batch = 4;
  EXPECT_NO_THROW(evaluate(m, l, c));
}

}  // namespace
}  // namespace kiri::plan
