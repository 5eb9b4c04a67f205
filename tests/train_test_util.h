#pragma once
// Helpers shared by the trainer tests (ddp/, zero/, pipeline/, train/).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/train/trainer.h"
#include "test_paths.h"

namespace kiri::train {

// A byte-level GPT of n_layer blocks of n_embd (n_head heads) on the test corpus, sequences
// of 32 tokens (block_size 32), micro_batch of them per micro-batch; no checkpoints, no
// metrics file. The trainer tests start from it and set what they vary.
inline RunConfig byte_test_config(int n_layer, int n_head, int n_embd, int64_t micro_batch) {
  RunConfig c = default_run_config();
  c.model.n_layer = n_layer;
  c.model.n_head = n_head;
  c.model.n_embd = n_embd;
  c.model.block_size = 32;
  c.data.tokenizer = "byte";
  c.data.assets = KIRI_TEST_DATA_DIR;
  c.train.micro_batch = micro_batch;
  c.train.seq_len = 32;
  c.checkpoint.dir.clear();
  c.log.metrics.clear();
  return c;
}

// The equivalence tests' run: 10 steps, lr 3e-3 decaying to 3e-4 after 2 warm-up steps, a
// 60 s collective timeout.
inline RunConfig equivalence_config(int n_layer, int n_head, int n_embd, int64_t micro_batch) {
  RunConfig c = byte_test_config(n_layer, n_head, n_embd, micro_batch);
  c.train.steps = 10;
  c.train.warmup = 2;
  c.train.optimizer.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.parallel.timeout_s = 60;
  return c;
}

// The trainer tests' Llama (model.arch = llama): n_embd wide with n_head query heads and
// kv_heads key/value heads, a SwiGLU of `intermediate`, an untied head unless `tied`; the
// test's blocks, block_size and vocabulary as they were.
inline void make_llama(RunConfig& c, int n_embd, int n_head, int kv_heads, int intermediate,
                       bool tied = false) {
  c.model.arch = kiri::Arch::kLlama;
  c.model.n_embd = n_embd;
  c.model.n_head = n_head;
  c.model.num_key_value_heads = kv_heads;
  c.model.intermediate_size = intermediate;
  c.model.tie_word_embeddings = tied;
}

inline const char* arch_name(kiri::Arch a) {
  return a == kiri::Arch::kLlama ? "llama" : "gpt2";
}

// name -> fp32 values of the whole model, on rank 0 (empty elsewhere).
inline std::map<std::string, std::vector<float>> params_of(Trainer& t) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, v] : t.gather_model()) {
    const float* d = v.data<float>();
    out[name].assign(d, d + v.numel());
  }
  return out;
}

// Largest |a - b| over every parameter; a parameter missing from b fails.
inline double max_abs_diff(const std::map<std::string, std::vector<float>>& a,
                           const std::map<std::string, std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (const auto& [name, va] : a) {
    const auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << name << " missing";
      continue;
    }
    EXPECT_EQ(va.size(), it->second.size()) << name;
    for (size_t i = 0; i < va.size() && i < it->second.size(); ++i)
      m = std::max(m, static_cast<double>(std::fabs(va[i] - it->second[i])));
  }
  return m;
}

// One folder for all ranks (MPI ranks are processes: rank 0's pid names it).
inline std::string shared_temp_dir(comm::Communicator& world, const std::string& name) {
  Allocator alloc;
  Tensor pid = Tensor::empty({1}, DType::kI32, Category::kOther, alloc);
  pid.data<int32_t>()[0] = static_cast<int32_t>(::getpid());
  world.broadcast(pid, 0);
  return std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/kiri_" + name +
         "_" + std::to_string(world.size()) + "_" + std::to_string(pid.data<int32_t>()[0]);
}

// Checkpoints across layouts: `parallel` on world trains `before` steps, saves under
// root/parallel and trains `after` more; one process (`single`, the same global batch)
// resumes that checkpoint with the same losses (1e-5 relative) and saves under root/single;
// world resumes that one, and its next `back` losses equal the single process's. Removes
// root.
inline void checkpoint_round_trip(comm::Communicator& world, RunConfig parallel, RunConfig single,
                                  const std::string& root, int before, int after, int back) {
  parallel.checkpoint.dir = root + "/parallel";
  std::vector<double> losses;
  {
    Trainer t(parallel, world);
    for (int s = 0; s < before; ++s) t.train_step();
    t.save_checkpoint();
    for (int s = 0; s < after; ++s) losses.push_back(t.train_step().loss);
  }
  if (world.rank() == 0) {
    RunConfig one = single;
    one.checkpoint.dir = root + "/single";
    Trainer t(one);
    t.load_checkpoint(parallel.checkpoint.dir);
    EXPECT_EQ(t.step(), before);
    for (int s = 0; s < after; ++s)
      EXPECT_NEAR(t.train_step().loss, losses[s], 1e-5 * losses[s]) << s;
    t.save_checkpoint();
  }
  world.barrier();
  {
    RunConfig again = parallel;
    again.checkpoint.dir = root + "/single";
    Trainer t(again, world);
    t.load_checkpoint(again.checkpoint.dir);
    EXPECT_EQ(t.step(), before + after);
    losses.clear();
    for (int s = 0; s < back; ++s) losses.push_back(t.train_step().loss);
    world.barrier();
    if (world.rank() == 0) {
      RunConfig one = single;
      one.checkpoint.dir.clear();
      Trainer r(one);
      r.load_checkpoint(root + "/single");
      for (int s = 0; s < back; ++s)
        EXPECT_NEAR(r.train_step().loss, losses[s], 1e-5 * losses[s]) << s;
    }
  }
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(root);
}

}  // namespace kiri::train
