#include "zero/zero_bodies.h"

#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <unistd.h>

#include "kiri/comm/self.h"
#include "kiri/train/trainer.h"
#include "lowp_tolerance.h"
#include "train_test_util.h"

namespace kiri::train {

namespace {

// n_embd 30: block units of 11190 elements, so 4 ranks need padding.
RunConfig zero_config(int dp, int64_t micro_batch, ZeroCase k) {
  RunConfig c = equivalence_config(2, 2, 30, micro_batch);
  if (k.arch == kiri::Arch::kLlama) make_llama(c, 24, 4, 2, 64);
  c.train.grad_accum = k.grad_accum;
  c.train.dtype = k.dtype;
  c.parallel.dp = dp;
  c.parallel.zero_stage = k.stage;
  c.parallel.prefetch = k.prefetch;
  c.parallel.wrap_blocks = k.wrap_blocks;
  if (k.shard_group_size > 0) {
    c.parallel.zero_stage = 0;
    c.parallel.sharding_strategy = kiri::ShardingStrategy::kHybridShard;
    c.parallel.shard_group_size = k.shard_group_size;
  }
  if (k.checkpoint_every > 0) {
    c.parallel.activation_checkpointing = ActivationCheckpointing::kEveryK;
    c.parallel.activation_checkpointing_k = k.checkpoint_every;
  }
  return c;
}

int64_t bytes_sent(const StepMetrics& m) {
  int64_t b = 0;
  for (const auto& [kind, s] : m.comm) b += s.bytes_sent;
  return b;
}

}  // namespace

void zero_equivalence(comm::Communicator& world, ZeroCase k) {
  omp_set_num_threads(1);  // ranks share the cores
  const int n = world.size();
  ZeroCase base = k;
  base.stage = 0;
  base.shard_group_size = 0;
  base.checkpoint_every = 0;  // the reference keeps every activation
  Trainer ref(zero_config(n, 2, base), world);
  Trainer z(zero_config(n, 2, k), world);
  if (k.dtype == kiri::Precision::kFp32) {
    for (int s = 0; s < 10; ++s) {
      const double a = ref.train_step().loss, b = z.train_step().loss;
      EXPECT_NEAR(a, b, 1e-6 * std::fabs(a)) << "step " << s + 1 << " rank " << world.rank();
    }
    const auto pa = params_of(ref), pb = params_of(z);
    if (world.rank() == 0) {
      EXPECT_LT(max_abs_diff(pa, pb), 1e-5);
    }
    return;
  }
  // 16-bit: stage 0 and stage k round the same sums, but the reductions add
  // in a different order: r = 2 roundings of a reduced gradient may differ
  // (one on each side); the fp32 version's tolerance is 1e-6.
  LowpDrift drift(ref.config(), 2, false, 1e-6);
  expect_losses_within(world, ref, z, drift, 10);
  const auto pa = params_of(ref), pb = params_of(z);
  if (world.rank() == 0) expect_params_within(pa, pb, drift);
}

void mixed_precision_tracks_fp32(comm::Communicator& world, ZeroCase k) {
  omp_set_num_threads(1);
  const int n = world.size();
  Trainer ref(zero_config(n, 2, {.stage = 0, .arch = k.arch}), world);
  Trainer z(zero_config(n, 2, k), world);
  // Against fp32 every 16-bit copy is rounded, and each weight gradient
  // carries r = 4 roundings fp32 does not make (its two 16-bit GEMM inputs,
  // its 16-bit result and the 16-bit all-reduce); the fp32 runs' own
  // tolerance is 1e-6. docs/zero.md quotes the observed drift.
  LowpDrift drift(z.config(), 4, true, 1e-6);
  expect_losses_within(world, ref, z, drift, 10);
}

void zero_memory_matches_formula(comm::Communicator& world, ZeroCase k) {
  omp_set_num_threads(1);
  const int n = world.size();
  Trainer t(zero_config(n, 2, k), world);
  t.train_step();
  const MemoryStats s = t.allocator().stats();
  // Ψ and the padded P from the model's shape alone: the units are the embeddings, each
  // block, and the final norm (with an untied head).
  const kiri::GPTConfig& m = t.config().model;
  const int64_t c = m.n_embd, v = m.vocab_size;
  int64_t emb = v * c + int64_t{m.block_size} * c, final_norm = 2 * c;
  int64_t block =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  if (m.llama()) {  // RMSNorms, q and o, k and v (kv columns), gate, up and down; the head
    const int64_t kv = int64_t{m.kv_heads()} * m.head_dim(), i = m.mlp_width();
    emb = v * c;
    block = 2 * c + 2 * c * c + 2 * c * kv + 3 * c * i;
    final_norm = c + (m.tie_word_embeddings ? 0 : v * c);
  }
  const int64_t psi = emb + m.n_layer * block + final_norm;
  ASSERT_EQ(psi, m.num_parameters());
  const int g = k.shard_group_size > 0 ? k.shard_group_size : n;
  auto pad = [g](int64_t x) { return (x + g - 1) / g * g; };
  const int64_t padded = pad(emb) + m.n_layer * pad(block) + pad(final_norm);  // wrap_blocks = 1
  ASSERT_EQ(k.wrap_blocks, 1);
  const bool mixed = k.dtype != kiri::Precision::kFp32;
  const int64_t d = mixed ? 2 : 4, opt = mixed ? 12 : 8;
  int64_t params = 0, grads = 0, states = 0;
  switch (k.stage) {
    case 0:
      params = d * psi, grads = d * psi, states = opt * psi;
      break;
    case 1:
      params = d * padded, grads = d * padded, states = opt * padded / g;
      break;
    case 2:
      params = d * padded, grads = d * padded / g, states = opt * padded / g;
      break;
    default:
      params = d * padded / g, grads = d * padded / g, states = opt * padded / g;
      break;
  }
  EXPECT_EQ(s.of(Category::kParameters), params) << "stage " << k.stage << " rank " << world.rank();
  EXPECT_EQ(s.of(Category::kGradients), grads) << "stage " << k.stage;
  EXPECT_EQ(s.of(Category::kOptimizerStates), states) << "stage " << k.stage;
  if (k.stage >= 2) {
    // The transient full units live in buffers: at least the largest unit's
    // gradient (stage 3: and parameters) was there at once; never more than
    // the schedule allows (stage 3: unit 0 and two more gathered, unit 0's
    // and up to all the others' gradients in flight), plus the rest of the
    // step's buffers, which stage 0 measures.
    const int64_t unit_max = std::max({pad(emb), pad(block), pad(final_norm)});
    EXPECT_GE(s.peak_of(Category::kBuffers), d * unit_max * (k.stage == 3 ? 2 : 1));
    const int64_t schedule = d * (k.stage == 3 ? 3 * unit_max : 0) + d * padded * 2;
    Trainer t0(zero_config(n, 2, {.stage = 0, .dtype = k.dtype, .arch = k.arch}), world);
    t0.train_step();
    EXPECT_LE(s.peak_of(Category::kBuffers),
              t0.allocator().stats().peak_of(Category::kBuffers) + schedule);
  }
}

void zero_comm_volume(comm::Communicator& world) {
  omp_set_num_threads(1);
  const int n = world.size();
  std::vector<int64_t> bytes;
  int64_t padded = 0, psi = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    RunConfig cfg = zero_config(n, 2, {.stage = stage});
    // A vocabulary large enough that DDP's extra (it all-gathers the
    // token-embedding rows, 2 x 32 of them per rank) stays near 1%.
    cfg.model.vocab_size = 8192;
    Trainer t(cfg, world);
    bytes.push_back(bytes_sent(t.train_step()));
    if (stage == 0) psi = t.config().model.num_parameters();
    if (stage == 3)
      for (const auto& u : t.parallel_model().sharded()->units()) padded += u.padded;
  }
  // Exactly: a reduce-scatter or all-gather sends (N-1)/N of the buffer, an
  // all-reduce twice that; plus the reported loss (one f64 all-reduce) and,
  // when sharded, the squared gradient norm (one more).
  const int64_t loss = 2 * (n - 1) * 8 / n, norm = loss;
  EXPECT_EQ(bytes[1], 2 * (n - 1) * padded * 4 / n + loss + norm);
  EXPECT_EQ(bytes[2], 2 * (n - 1) * padded * 4 / n + loss + norm);
  EXPECT_EQ(bytes[3], 3 * (n - 1) * padded * 4 / n + loss + norm);
  const int64_t rows = (n - 1) * 2 * 32 * (4 + 30 * 4);  // DDP's token-embedding rows
  EXPECT_EQ(bytes[0], 2 * (n - 1) * psi * 4 / n + rows + loss);
  const double ddp = static_cast<double>(bytes[0]);
  EXPECT_NEAR(bytes[1] / ddp, 1.0, 0.02) << bytes[1] << " vs DDP " << bytes[0];
  EXPECT_NEAR(bytes[2] / ddp, 1.0, 0.02) << bytes[2] << " vs DDP " << bytes[0];
  EXPECT_NEAR(bytes[3] / ddp / 1.5, 1.0, 0.02) << bytes[3] << " vs DDP " << bytes[0];
}

void fp16_skips_the_overflowing_step(comm::Communicator& world, int stage) {
  omp_set_num_threads(1);
  const int n = world.size();
  ZeroCase k{.stage = stage, .dtype = kiri::Precision::kFp16};
  Trainer t(zero_config(n, 2, k), world);
  ASSERT_NE(t.loss_scaler(), nullptr);
  world.barrier();
  if (world.rank() == 0) setenv("KIRI_FAULT", "inf:0:3", 1);  // rank 0's loss in step 3
  world.barrier();
  std::vector<StepMetrics> ms;
  for (int s = 0; s < 5; ++s) ms.push_back(t.train_step());
  world.barrier();
  if (world.rank() == 0) unsetenv("KIRI_FAULT");
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(ms[s].skipped, s == 2) << "step " << s + 1 << " rank " << world.rank();
    EXPECT_TRUE(ms[s].loss_scale.has_value());
  }
  EXPECT_DOUBLE_EQ(*ms[3].loss_scale, *ms[2].loss_scale / 2);
  EXPECT_EQ(ms[4].skipped_steps, 1);
  EXPECT_EQ(t.optimizer().step_count(), 4);
  EXPECT_TRUE(std::isfinite(ms[4].grad_norm));
}

void zero_checkpoint_refuses_bad_shards(comm::Communicator& world) {
  omp_set_num_threads(1);
  const int n = world.size();
  const std::string root = shared_temp_dir(world, "zero_bad_shards");
  RunConfig cfg = zero_config(n, 2, {.stage = 3});
  cfg.checkpoint.dir = root;
  std::string dir;
  {
    Trainer t(cfg, world);
    t.train_step();
    dir = t.save_checkpoint();
  }
  auto expect_refused = [&](const std::string& needle) {
    Trainer t(cfg, world);
    try {
      t.load_checkpoint(root);
      ADD_FAILURE() << "loaded a damaged checkpoint";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    world.barrier();
  };
  const std::string shard =
      dir + "/optimizer-00001-of-" + (n == 2 ? "00002" : "00004") + ".safetensors";
  const std::string saved = shard + ".saved";
  if (world.rank() == 0) std::filesystem::rename(shard, saved);
  world.barrier();
  expect_refused("optimizer-00001-of-0000" + std::to_string(n) +
                 ".safetensors in its manifest, but the file is missing");
  if (world.rank() == 0) {
    std::filesystem::copy_file(saved, shard);
    std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 7);
  }
  world.barrier();
  expect_refused("optimizer-00001-of");
  if (world.rank() == 0) std::filesystem::remove_all(root);
}

// N ranks at stage 3 against 1 process at stage 0 on the same global batch, both ways.
void zero_checkpoint_across_layouts(comm::Communicator& world, kiri::Arch arch) {
  omp_set_num_threads(1);
  const int n = world.size();
  checkpoint_round_trip(world, zero_config(n, 2, {.stage = 3, .arch = arch}),
                        zero_config(1, 2 * n, {.stage = 0, .arch = arch}),
                        shared_temp_dir(world, "zero_ckpt"), 3, 2, 2);
}

}  // namespace kiri::train
