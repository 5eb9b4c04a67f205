// The planner's offload tiers: each category's bytes in memory and on NVMe for each offload
// mode against formulas by hand (exact bytes), the disk time of the time model, and the
// recommendation for GPT-2 1.5B on this machine (docs/planner.md, "Offload").
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kiri/base/error.h"
#include "kiri/plan/calibration.h"
#include "kiri/plan/memory.h"
#include "kiri/plan/planner.h"
#include "kiri/plan/time.h"

namespace kiri::plan {
namespace {

constexpr double MiB = 1024.0 * 1024.0;
constexpr double GiB = 1024.0 * MiB;

// A tiny GPT-2: 2 layers of 64, 4 heads, the byte tokenizer's 257 symbols, context 32.
ModelSpec tiny() {
  return model_from_dims(2, 64, 4, 257, 32);
}

Layout tiny_layout(int dp, int zero, Precision dtype) {
  Layout l;
  l.dp = dp;
  l.zero_stage = zero;
  l.dtype = dtype;
  l.micro_batch = 2;
  l.seq_len = 32;
  l.global_batch = 2 * dp;
  return l;
}

TEST(PlanOffload, PoolIsCountChunksOfEveryStateRoundedToBlocks) {
  OffloadSpec o;  // 4 x 64 MiB, 1 MiB blocks
  // bf16: 3 states; a chunk is 64 MiB / 12 = 5592405.33 elements, whole blocks of 262144:
  // 21 blocks = 5505024 elements; the buffer 5505024 x 12 bytes.
  EXPECT_DOUBLE_EQ(offload_pool_bytes(o, Precision::kBf16, 1e9), 4.0 * 5505024 * 12);
  // fp32: 2 states: 64 MiB / 8 = 8388608 elements = 32 blocks exactly.
  EXPECT_DOUBLE_EQ(offload_pool_bytes(o, Precision::kFp32, 1e9), 4.0 * 8388608 * 8);
  // A state smaller than a chunk: itself rounded up to a block (1000 -> 262144 elements).
  EXPECT_DOUBLE_EQ(offload_pool_bytes(o, Precision::kBf16, 1000), 4.0 * 262144 * 12);
  EXPECT_DOUBLE_EQ(offload_pool_bytes(o, Precision::kBf16, 262145), 4.0 * 524288 * 12);
  // Parameter offload streams the 2-byte values with the states: 14 bytes an element, in
  // granules of 1 MiB / 2 elements: 64 MiB / 14 = 4793490.3 -> 9 granules = 4718592.
  OffloadSpec v = o;
  v.optimizer = v.parameters = OffloadTarget::kNvme;
  EXPECT_DOUBLE_EQ(offload_pool_bytes(v, Precision::kBf16, 1e9), 4.0 * 4718592 * 14);
  EXPECT_DOUBLE_EQ(offload_pool_bytes(v, Precision::kBf16, 1000), 4.0 * 524288 * 14);
  // fp32 values: 12 bytes, granules of 262144: 64 MiB / 12 -> 21 granules.
  EXPECT_DOUBLE_EQ(offload_pool_bytes(v, Precision::kFp32, 1e9), 4.0 * 5505024 * 12);
  // 2 buffers of 1 MiB with 64 KiB blocks, fp32: 1 MiB / 8 = 131072 elements = 8 blocks.
  o.buffer_count = 2;
  o.buffer_bytes = int64_t{1} << 20;
  o.block_size = 64 << 10;
  EXPECT_DOUBLE_EQ(offload_pool_bytes(o, Precision::kFp32, 1e6), 2.0 * 131072 * 8);
}

// The tiny model's parameters: wte 257 x 64 + wpe 32 x 64 = 18496, two blocks of
// 12 x 64² + 13 x 64 = 49984 each, ln_f 128: 118592.
constexpr double kTinyParams = 18496 + 2 * 49984 + 128;

TEST(PlanOffload, OptimizerOffloadMovesTheStatesToNvmeAndAddsThePool) {
  const ModelSpec m = tiny();
  ASSERT_DOUBLE_EQ(stage_params(m, 1, 1, 0), kTinyParams);
  for (Precision dtype : {Precision::kFp32, Precision::kBf16}) {
    const double d = dtype == Precision::kFp32 ? 4 : 2, k = dtype == Precision::kFp32 ? 8 : 12;
    for (int zero = 0; zero <= 3; ++zero) {
      const int dp = zero == 0 ? 1 : 4;
      Layout l = tiny_layout(dp, zero, dtype);
      const MemoryBreakdown plain = rank_memory(m, l, 0);
      l.offload.optimizer = OffloadTarget::kNvme;
      const MemoryBreakdown off = rank_memory(m, l, 0);
      const double shard = zero >= 1 ? kTinyParams / dp : kTinyParams;
      // RAM: no optimizer states; the pool (a state this small: one block of each state,
      // 262144 elements x 4 bytes x states, 4 buffers) in buffers. NVMe: K bytes per element.
      EXPECT_DOUBLE_EQ(off.optimizer_states, 0) << zero;
      EXPECT_DOUBLE_EQ(off.nvme.optimizer_states, k * shard) << zero;
      EXPECT_DOUBLE_EQ(off.nvme.parameters, 0);
      EXPECT_DOUBLE_EQ(off.buffers, plain.buffers + 4 * 262144 * 4 * (k / 4)) << zero;
      EXPECT_DOUBLE_EQ(off.parameters, d * (zero >= 3 ? kTinyParams / dp : kTinyParams));
      EXPECT_DOUBLE_EQ(off.gradients, plain.gradients);
      EXPECT_DOUBLE_EQ(off.activations, plain.activations);
      EXPECT_DOUBLE_EQ(off.total(), plain.total() - k * shard + 4 * 262144 * k);
      EXPECT_DOUBLE_EQ(off.all_model_states(), plain.model_states());
    }
  }
}

TEST(PlanOffload, ParameterOffloadMovesTheShardAndStagesTwoUnits) {
  const ModelSpec m = tiny();
  Layout l = tiny_layout(4, 3, Precision::kBf16);
  const MemoryBreakdown plain = rank_memory(m, l, 0);
  l.offload.optimizer = l.offload.parameters = OffloadTarget::kNvme;
  const MemoryBreakdown off = rank_memory(m, l, 0);
  // The largest unit is a block (49984 > the embeddings' 18496): two of its shards staged,
  // 12496 x 2 bytes each in whole pages (28672); the pool streams the values too (14 bytes
  // an element, one granule of 524288).
  EXPECT_DOUBLE_EQ(off.parameters, 0);
  EXPECT_DOUBLE_EQ(off.nvme.parameters, 2 * kTinyParams / 4);
  EXPECT_DOUBLE_EQ(off.nvme.optimizer_states, 12 * kTinyParams / 4);
  EXPECT_DOUBLE_EQ(off.buffers, plain.buffers + 4 * 524288 * 14 + 2 * 28672);
  EXPECT_DOUBLE_EQ(off.gradients, plain.gradients);
  EXPECT_DOUBLE_EQ(off.activations, plain.activations);
}

// Gradient offload (ZeRO 2-3): the gradient shard moves to NVMe; in RAM (buffers) stay the
// units in flight (sharded.cpp): kMaxInflightGradWrites shards, and accumulating
// kMaxInflightReductions + 1 more; the pool streams the 2-byte gradients with the states.
TEST(PlanOffload, GradientOffloadMovesTheShardAndKeepsTheUnitsInFlight) {
  const ModelSpec m = tiny();
  for (int64_t accumulation : {1, 3}) {
    Layout l = tiny_layout(4, 2, Precision::kBf16);
    l.global_batch *= accumulation;
    const MemoryBreakdown plain = rank_memory(m, l, 0);
    l.offload.optimizer = l.offload.gradients = OffloadTarget::kNvme;
    const MemoryBreakdown off = rank_memory(m, l, 0);
    // The largest unit (a block, 49984) has shards of 12496 x 2 bytes: 7 pages (28672).
    const double units = accumulation == 1 ? 1 : 4;
    EXPECT_DOUBLE_EQ(off.gradients, 0) << accumulation;
    EXPECT_DOUBLE_EQ(off.nvme.gradients, 2 * kTinyParams / 4) << accumulation;
    EXPECT_DOUBLE_EQ(off.nvme.gradients, plain.gradients);
    EXPECT_DOUBLE_EQ(off.parameters, plain.parameters);
    // The pool: 14 bytes an element (master, m, v and the gradient) in granules of 524288,
    // and the unit shards in flight.
    EXPECT_DOUBLE_EQ(off.buffers, plain.buffers + 4 * 524288 * 14 + units * 28672);
    EXPECT_DOUBLE_EQ(off.all_model_states(), plain.model_states());
  }
  // With parameter offload too: the values and the gradients stream (16 bytes an element).
  Layout l = tiny_layout(4, 3, Precision::kBf16);
  l.offload.optimizer = l.offload.parameters = l.offload.gradients = OffloadTarget::kNvme;
  EXPECT_DOUBLE_EQ(offload_pool_bytes(l.offload, Precision::kBf16, 1e9),
                   4.0 * 4194304 * 16);  // 64 MiB / 16 = 4194304 = 8 granules exactly
  const MemoryBreakdown all = rank_memory(m, l, 0);
  EXPECT_DOUBLE_EQ(all.parameters + all.optimizer_states, 0);
  EXPECT_DOUBLE_EQ(all.nvme.total(), (2 + 2 + 12) * kTinyParams / 4);
  EXPECT_EQ(l.str().find("offload optimizer+parameters+gradients") != std::string::npos, true)
      << l.str();
}

TEST(PlanOffload, ExactModeUsesThePaddedShards) {
  const ModelSpec m = tiny();
  for (int zero = 0; zero <= 3; ++zero) {
    const int dp = zero == 0 ? 1 : 3;  // 3 does not divide the units: padding
    Layout l = tiny_layout(dp, zero, Precision::kFp32);
    const MemoryBreakdown plain = rank_memory_exact(m, l, 0);
    l.offload.optimizer = OffloadTarget::kNvme;
    if (zero == 3) l.offload.parameters = OffloadTarget::kNvme;
    const MemoryBreakdown off = rank_memory_exact(m, l, 0);
    // Units: the embeddings 18496, two blocks of 49984, ln_f 128; padded to multiples of 3:
    // 18498, 49986, 49986, 129 -> shards 6166, 16662, 16662, 43.
    const double state = zero == 0 ? kTinyParams : 6166 + 2 * 16662 + 43;
    EXPECT_DOUBLE_EQ(off.nvme.optimizer_states, 8 * state) << zero;
    EXPECT_DOUBLE_EQ(off.nvme.optimizer_states, plain.optimizer_states) << zero;
    EXPECT_DOUBLE_EQ(off.optimizer_states, 0);
    double staged = 4 * 262144 * 8;
    if (zero == 3) {
      EXPECT_DOUBLE_EQ(off.nvme.parameters, 4 * state);
      EXPECT_DOUBLE_EQ(off.parameters, 0);
      // The values in the pool (12 bytes an element), two 16662-value shards in pages.
      staged = 4 * 262144 * 12 + 2 * 69632;
    }
    EXPECT_DOUBLE_EQ(off.buffers, plain.buffers + staged) << zero;
    EXPECT_DOUBLE_EQ(off.activations, plain.activations);
  }
}

TEST(PlanOffload, ValidationNamesTheRule) {
  const ModelSpec m = tiny();
  Layout l = tiny_layout(2, 2, Precision::kBf16);
  l.offload.parameters = OffloadTarget::kNvme;
  try {
    validate(l, m);
    FAIL() << "parameter offload at stage 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("ZeRO stage 3"), std::string::npos) << e.message();
  }
  l.zero_stage = 3;  // stage 3, but the optimizer states stay: kiri's rule
  EXPECT_THROW(validate(l, m), Error);
  l.offload.optimizer = OffloadTarget::kNvme;
  EXPECT_NO_THROW(validate(l, m));
  l.offload.gradients = OffloadTarget::kNvme;
  EXPECT_NO_THROW(validate(l, m));
  l = tiny_layout(2, 1, Precision::kBf16);  // stage 1 keeps whole gradients
  l.offload.optimizer = l.offload.gradients = OffloadTarget::kNvme;
  try {
    validate(l, m);
    FAIL() << "gradient offload at stage 1";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("ZeRO stage 2 or 3"), std::string::npos) << e.message();
  }
  l.zero_stage = 2;
  EXPECT_NO_THROW(validate(l, m));
  l.offload.optimizer = OffloadTarget::kNone;  // the optimizer reads them with its states
  EXPECT_THROW(validate(l, m), Error);
  l = tiny_layout(1, 0, Precision::kBf16);
  l.offload.optimizer = OffloadTarget::kNvme;
  l.offload.buffer_bytes = 2 << 20;  // 3 states x 1 MiB do not fit 2 MiB
  EXPECT_THROW(validate(l, m), Error);
  l.offload.buffer_bytes = 3 << 20;
  EXPECT_NO_THROW(validate(l, m));
  l.offload.buffer_count = 1;
  EXPECT_THROW(validate(l, m), Error);
  l.offload.buffer_count = 2;
  l.offload.block_size = 1000;
  EXPECT_THROW(validate(l, m), Error);
  try {
    parse_offload("cpu", "offload.optimizer");
    FAIL() << "cpu";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("same RAM"), std::string::npos) << e.message();
  }
  EXPECT_EQ(parse_offload("nvme", "x"), OffloadTarget::kNvme);
}

// A one-node cluster of 2 devices whose disk is 1 GB/s read and 0.5 GB/s write.
ClusterSpec slow_disk() {
  ClusterSpec c = this_machine_assumed();
  c.disk = {1e9, 0.5e9, false};
  return c;
}

TEST(PlanOffload, TimeAddsTheDiskByHand) {
  const ModelSpec m = tiny();
  const ClusterSpec c = slow_disk();
  Layout l = tiny_layout(2, 3, Precision::kBf16);
  const TimeBreakdown plain = estimate_time(m, l, c);
  EXPECT_DOUBLE_EQ(plain.disk_read_bytes, 0);
  EXPECT_DOUBLE_EQ(plain.io_exposed_s, 0);
  l.offload.optimizer = OffloadTarget::kNvme;
  const TimeBreakdown opt = estimate_time(m, l, c);
  // The states (12 bytes x Ψ/2) read and written once; 2 ranks share the disk.
  const double states = 12 * kTinyParams / 2;
  EXPECT_DOUBLE_EQ(opt.disk_read_bytes, states);
  EXPECT_DOUBLE_EQ(opt.disk_write_bytes, states);
  EXPECT_DOUBLE_EQ(opt.disk_read_s, states / 0.5e9);
  EXPECT_DOUBLE_EQ(opt.disk_write_s, states / 0.25e9);
  // Streamed under the update and the next forward (one micro-batch's: its share of the
  // FLOPs, a third of the model FLOPs): the step pays the I/O beyond both.
  const double io = states / 0.5e9 + states / 0.25e9;
  const double fb = plain.compute_s - plain.optimizer_s;  // m x the stage's forward+backward
  const double forward = fb / static_cast<double>(l.step_microbatches()) *
                         (plain.model_flops_per_step / 3) / plain.flops_per_step;
  EXPECT_NEAR(opt.io_exposed_s, std::max(0.0, io - plain.optimizer_s - forward), 1e-12);
  EXPECT_GT(opt.io_exposed_s, 0);  // a fast update (10 GB/s) does not hide a slow disk
  EXPECT_GT(opt.step_s, plain.step_s);
  EXPECT_DOUBLE_EQ(opt.step_s, plain.step_s + opt.io_exposed_s);
  // Parameter offload: the 2-byte shard read twice (forward, backward), written once.
  l.offload.parameters = OffloadTarget::kNvme;
  const TimeBreakdown par = estimate_time(m, l, c);
  const double shard = 2 * kTinyParams / 2;
  EXPECT_DOUBLE_EQ(par.disk_read_bytes, states + 2 * shard);
  EXPECT_DOUBLE_EQ(par.disk_write_bytes, states + shard);
  const double update = states / 0.5e9 + (states + shard) / 0.25e9;
  EXPECT_NEAR(
      par.io_exposed_s,
      std::max(0.0, update - plain.optimizer_s - forward) + std::max(0.0, 2 * shard / 0.5e9 - fb),
      1e-12);
}

// Gradient offload: every micro-batch writes the shard, the later ones read it back first,
// and the update reads the final one with the states.
TEST(PlanOffload, GradientTimeByHand) {
  const ModelSpec m = tiny();
  const ClusterSpec c = slow_disk();
  Layout l = tiny_layout(2, 2, Precision::kBf16);
  l.global_batch *= 3;  // 3 micro-batches
  const TimeBreakdown plain = estimate_time(m, l, c);
  l.offload.optimizer = l.offload.gradients = OffloadTarget::kNvme;
  const TimeBreakdown t = estimate_time(m, l, c);
  const double states = 12 * kTinyParams / 2, grads = 2 * kTinyParams / 2;
  EXPECT_DOUBLE_EQ(t.disk_read_bytes, states + 3 * grads);
  EXPECT_DOUBLE_EQ(t.disk_write_bytes, states + 3 * grads);
  const double fb = plain.compute_s - plain.optimizer_s;
  const double forward = fb / 3.0 * (plain.model_flops_per_step / 3) / plain.flops_per_step;
  const double update = (states + grads) / 0.5e9 + states / 0.25e9;
  const double under = 2 * grads / 0.5e9 + 3 * grads / 0.25e9;
  // The shards on NVMe: no zeroing pass in memory (the update still reads the norm's).
  EXPECT_NEAR(t.optimizer_s, plain.optimizer_s - kTinyParams / 2 * c.non_gemm.zeroing_s, 1e-15);
  EXPECT_NEAR(t.io_exposed_s,
              std::max(0.0, update - t.optimizer_s - forward) + std::max(0.0, under - fb), 1e-12);
}

TEST(PlanOffload, IoHiddenWhenTheUpdateIsSlower) {
  const ModelSpec m = tiny();
  ClusterSpec c = slow_disk();
  // A slow update: 1 ms per element hides the disk.
  c.non_gemm.optimizer_s = c.non_gemm.optimizer_zeroing_s = 1e-3;
  Layout l = tiny_layout(1, 0, Precision::kFp32);
  const TimeBreakdown plain = estimate_time(m, l, c);
  l.offload.optimizer = OffloadTarget::kNvme;
  const TimeBreakdown off = estimate_time(m, l, c);
  EXPECT_GT(off.disk_read_s + off.disk_write_s, 0);
  EXPECT_DOUBLE_EQ(off.io_exposed_s, 0);
  // Offloaded, the deferred update zeroes each unit's gradients in a pass of its own.
  EXPECT_NEAR(off.step_s, plain.step_s + kTinyParams * c.non_gemm.zeroing_s, 1e-12);
}

PlanRequest gpt2_xl_here() {
  PlanRequest r;
  r.model = model_preset("gpt2-1.5B");
  r.cluster = this_machine_assumed();  // 2 devices of 11 GiB, the assumed disk
  r.world = 2;
  r.base.dtype = Precision::kBf16;
  r.base.micro_batch = 1;
  r.base.seq_len = 1024;
  r.base.global_batch = 2;
  return r;
}

TEST(PlanOffload, Gpt2XlOnThisMachineIsOptimizerOffload) {
  PlanRequest r = gpt2_xl_here();
  r.offload_if_needed = false;
  const std::vector<Evaluation> none = enumerate_layouts(r);
  for (const Evaluation& e : none) EXPECT_FALSE(e.fits) << e.layout.str();
  EXPECT_FALSE(recommend(r, none).best.has_value());

  r.offload_if_needed = true;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  const Recommendation rec = recommend(r, cs);
  ASSERT_TRUE(rec.best.has_value()) << rec.message;
  const Evaluation& e = *rec.best;
  EXPECT_EQ(rec.cut, "offload");
  EXPECT_EQ(e.layout.offload.optimizer, OffloadTarget::kNvme);
  EXPECT_EQ(e.layout.offload.parameters, OffloadTarget::kNone);  // the optimizer first
  EXPECT_TRUE(e.fits);
  EXPECT_LE(e.memory.memory.total(), r.cluster.memory_bytes);
  // Every byte of the model states is on one tier or the other.
  const MemoryBreakdown all = worst_rank_memory(r.model,
                                                [&] {
                                                  Layout l = e.layout;
                                                  l.offload = {};
                                                  return l;
                                                }())
                                  .memory;
  EXPECT_DOUBLE_EQ(e.memory.memory.all_model_states(), all.model_states());
  EXPECT_GT(e.memory.memory.nvme.optimizer_states, 5 * GiB);
  EXPECT_GE(rec.offload_slowdown, 1.0);
  EXPECT_DOUBLE_EQ(rec.offload_slowdown, e.time.step_s / rec.step_without_offload_s);
  for (const char* w : {"offload the optimizer states", "NVMe", "predicted slowdown", "in memory"})
    EXPECT_NE(rec.message.find(w), std::string::npos) << w << ": " << rec.message;
  bool reason = false;
  for (const std::string& s : rec.reasons) reason |= s.rfind("offload", 0) == 0;
  EXPECT_TRUE(reason);
}

TEST(PlanOffload, ParametersTooWhenTheOptimizerIsNotEnough) {
  PlanRequest r = gpt2_xl_here();
  r.world = 1;
  // 1.5B x (2 + 2) bytes of parameters and gradients are 5.8 GiB: optimizer offload is not
  // enough; with the parameters (and with them the gradients: offload.gradients' auto) on
  // NVMe the rest fits.
  r.cluster.memory_bytes = 6 * GiB;
  const Recommendation rec = recommend(r, enumerate_layouts(r));
  ASSERT_TRUE(rec.best.has_value()) << rec.message;
  EXPECT_EQ(rec.cut, "offload");
  EXPECT_EQ(rec.best->layout.offload.optimizer, OffloadTarget::kNvme);
  EXPECT_EQ(rec.best->layout.offload.parameters, OffloadTarget::kNvme);
  EXPECT_EQ(rec.best->layout.offload.gradients, OffloadTarget::kNvme);
  EXPECT_EQ(rec.best->layout.zero_stage, 3);
  EXPECT_NE(rec.message.find("the optimizer states, the parameters and the gradients"),
            std::string::npos)
      << rec.message;
  // Nothing fits in 1 GiB (the activations, the staging pool and the units in flight stay).
  r.cluster.memory_bytes = 1 * GiB;
  const Recommendation none = recommend(r, enumerate_layouts(r));
  EXPECT_FALSE(none.best.has_value());
  EXPECT_NE(none.message.find("not even with"), std::string::npos) << none.message;
}

TEST(PlanOffload, NeverWhenALayoutFits) {
  PlanRequest r = gpt2_xl_here();
  r.model = model_preset("gpt2-124M");
  for (const Evaluation& e : enumerate_layouts(r)) EXPECT_FALSE(e.layout.offload.any());
  // Asked for, every layout takes it.
  r.base.offload.optimizer = OffloadTarget::kNvme;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  ASSERT_FALSE(cs.empty());
  for (const Evaluation& e : cs) EXPECT_EQ(e.layout.offload.optimizer, OffloadTarget::kNvme);
  EXPECT_NE(recommend(r, cs).cut, "offload");  // asked for, not the cut that made it fit
}

TEST(PlanOffload, CalibratedDiskReachesTheCluster) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiri_disk_cal_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Calibration c;
  c.cores = 2;
  c.memory_bytes = 8 * GiB;
  c.gemm_n = 1024;
  c.threads = 2;
  c.gemm_flops_1_thread = c.gemm_flops_all_threads = 100e9;
  c.link_method = "memcpy";
  c.samples = {{1e6, 1e-4}, {2e6, 2e-4}};
  c.bandwidth = 1e10;
  // Without a disk: the assumption, said so.
  const std::string none = (dir / "none.json").string();
  save_calibration(c, none);
  const ClusterSpec a = calibrated_cluster(*load_calibration(none), none);
  EXPECT_DOUBLE_EQ(a.disk.read_bandwidth, kAssumedDisk.read_bandwidth);
  EXPECT_FALSE(a.disk.measured);
  EXPECT_NE(describe_sources(a).find("offload disk 2 GB/s read"), std::string::npos)
      << describe_sources(a);
  c.disk = {"/tmp/x", "threads", 1 << 20, 256 << 20, 8, true, 3.5e9, 1.25e9};
  const std::string path = (dir / "disk.json").string();
  save_calibration(c, path);
  const Calibration back = *load_calibration(path);
  EXPECT_EQ(back.disk.engine, "threads");
  EXPECT_EQ(back.disk.block_size, 1 << 20);
  EXPECT_EQ(back.disk.queue_depth, 8);
  const ClusterSpec s = calibrated_cluster(back, path);
  EXPECT_DOUBLE_EQ(s.disk.read_bandwidth, 3.5e9);
  EXPECT_DOUBLE_EQ(s.disk.write_bandwidth, 1.25e9);
  EXPECT_TRUE(s.disk.measured);
  EXPECT_NE(describe_sources(s).find("disk of /tmp/x (O_DIRECT, threads, block 1048576 B, "
                                     "queue depth 8: read 3.5 GB/s, write 1.25 GB/s)"),
            std::string::npos)
      << describe_sources(s);
  // A disk of 0 bytes/s is a named error.
  {
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string key = "\"read_bytes_per_s\": 3500000000.0";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, key.size(), "\"read_bytes_per_s\": 0");
    std::ofstream(path) << text;
  }
  try {
    load_calibration(path);
    FAIL() << "a zero disk bandwidth";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("disk bandwidth"), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::plan
