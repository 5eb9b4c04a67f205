// The trainer's 16-bit GEMM path, chosen by measurement on the run's own shapes
// (train/gemm_choice.h): the shapes, the same rates on every rank, and what metrics say.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gemm_lowp_paths.h"
#include "kiri/comm/local/local.h"
#include "kiri/kernels/ops.h"
#include "kiri/kernels/peak.h"
#include "kiri/train/gemm_choice.h"
#include "kiri/train/trainer.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

using kernels::LowpGemmImpl;

// The MLP's first linear and the LM head, forward, dinput and dweight, as a tp rank cuts them.
TEST(GemmChoice, StepShapesAreTheLargestLinearAndTheHead) {
  GPTConfig gpt;
  gpt.n_embd = 768;
  gpt.vocab_size = 50257;
  const std::vector<kernels::LowpGemmShape> s = step_gemm_shapes(gpt, 4, 64, 1);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[0].role, "mlp forward");
  EXPECT_EQ((std::vector<int64_t>{s[0].M, s[0].N, s[0].K}), (std::vector<int64_t>{256, 3072, 768}));
  EXPECT_FALSE(s[0].trans_b);  // GPT-2's Conv1D [in, out]
  EXPECT_EQ(s[3].role, "lm_head forward");
  EXPECT_EQ((std::vector<int64_t>{s[3].M, s[3].N, s[3].K}),
            (std::vector<int64_t>{256, 50257, 768}));
  EXPECT_TRUE(s[3].trans_b);  // logits = x @ wte^T
  const std::vector<kernels::LowpGemmShape> cut = step_gemm_shapes(gpt, 4, 64, 2);
  EXPECT_EQ(cut[0].N, 1536);
  EXPECT_EQ(cut[3].N, 25129);  // the vocabulary's rows split over 2, rounded up
  GPTConfig llama = gpt;
  llama.arch = Arch::kLlama;
  llama.intermediate_size = 2048;
  const std::vector<kernels::LowpGemmShape> l = step_gemm_shapes(llama, 4, 64, 1);
  EXPECT_TRUE(l[0].trans_b);  // nn.Linear's [out, in]
  EXPECT_EQ(l[0].N, 2048);
}

// Rank 0 measures and every rank installs rank 0's rates, bit for bit (a rank that took the
// other path would not compute the same replica).
TEST(GemmChoice, EveryRankTakesRankZerosRates) {
  KIRI_USE_GEMM_LOWP(LowpGemmImpl::kAuto, DType::kBF16);
  if (kernels::gemm_lowp_onednn_kernel(DType::kBF16).empty())
    GTEST_SKIP() << "oneDNN has no BF16 matmul on this CPU: nothing to choose";
  omp_set_num_threads(1);
  const std::string dir = kiri::testing::temp_dir("gemm-choice-ranks");
  ::setenv("KIRI_GEMM_LOWP_CACHE", (dir + "/rates.txt").c_str(), 1);
  GPTConfig gpt;
  gpt.n_embd = 64;
  gpt.vocab_size = 300;
  const std::vector<kernels::LowpGemmShape> shapes = step_gemm_shapes(gpt, 2, 32, 1);
  std::mutex mu;
  std::vector<GemmLowpChoice> got(3);
  comm::run_local(3, [&](comm::Communicator& world) {
    Allocator allocator;
    GemmLowpChoice c = choose_gemm_lowp_path(world, DType::kBF16, shapes, allocator);
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<size_t>(world.rank())] = std::move(c);
  });
  ::unsetenv("KIRI_GEMM_LOWP_CACHE");
  kernels::clear_gemm_lowp_rates();
  EXPECT_EQ(got[0].rates.measured, 6);  // nothing cached in a fresh file
  EXPECT_EQ(got[0].rates.cache_file, dir + "/rates.txt");
  EXPECT_NE(got[0].note.find("chosen by measurement"), std::string::npos) << got[0].note;
  for (int r = 1; r < 3; ++r) {
    ASSERT_EQ(got[r].rates.shapes.size(), 6u);
    EXPECT_EQ(got[r].rates.measured, 0);  // rank 0's, not measured here
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(got[r].rates.shapes[i].via_f32, got[0].rates.shapes[i].via_f32);
      EXPECT_EQ(got[r].rates.shapes[i].onednn, got[0].rates.shapes[i].onednn);
      EXPECT_EQ(got[r].rates.shapes[i].shape.role, shapes[i].role);
    }
  }
}

// A bf16 run: every metrics row names the 16-bit GEMMs' path and what MFU is against (the
// bf16 peak's instruction); an fp32 run names no path.
TEST(GemmChoice, MetricsNameThePathAndThePeak) {
  omp_set_num_threads(1);
  const std::string dir = kiri::testing::temp_dir("gemm-choice-metrics");
  ::setenv("KIRI_GEMM_LOWP_CACHE", (dir + "/rates.txt").c_str(), 1);
  for (const Precision p : {Precision::kBf16, Precision::kFp32}) {
    kernels::clear_gemm_lowp_rates();
    RunConfig c = byte_test_config(2, 2, 32, 2);
    c.train.dtype = p;
    c.train.steps = 2;
    c.train.eval_every = 0;
    c.log.every = 1;
    const std::string metrics = dir + (p == Precision::kBf16 ? "/bf16.jsonl" : "/fp32.jsonl");
    c.log.metrics = metrics;
    Trainer t(c);
    t.run();
    const DType dt = p == Precision::kBf16 ? DType::kBF16 : DType::kF32;
    const std::string path =
        dt == DType::kF32 ? "" : kernels::gemm_lowp_impl_name(kernels::gemm_lowp_path(dt));
    std::ifstream in(metrics);
    int rows = 0;
    for (std::string line; std::getline(in, line); ++rows) {
      const nlohmann::json j = nlohmann::json::parse(line);
      EXPECT_EQ(j.value("gemm_lowp", ""), path) << line;
      EXPECT_NE(j.value("mfu_peak", "").find(kernels::core_peak(dt).instruction), std::string::npos)
          << line;
    }
    EXPECT_EQ(rows, 2);
  }
  ::unsetenv("KIRI_GEMM_LOWP_CACHE");
  kernels::clear_gemm_lowp_rates();
}

}  // namespace
}  // namespace kiri::train
