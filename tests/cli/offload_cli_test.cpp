// kiri train with offload, end to end: a run killed in a step resumes from its last
// checkpoint into offloaded state (its swap files kept and reused) with bitwise the losses
// of an uninterrupted run, and the files go at the clean exit; a checkpoint saved with
// offload resumes without it and on another layout.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;
using kiri::testing::run_kiri;

// A byte-level 2 x 32 model in run folder `dir`, bf16, the optimizer states on NVMe under
// the run folder in 4 KiB blocks and 64 KiB buffers.
std::string offload_run(const std::string& dir, const std::string& dtype = "bf16") {
  std::string s =
      " --set data.tokenizer=byte --set model.n_layer=2 --set model.n_embd=32"
      " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
      " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
      " --set train.dtype=" +
      dtype + " --set run.dir=" + dir;
  s += " --set offload.optimizer=nvme --set offload.block_size=4KiB --set "
       "offload.buffer_mb=0.0625";
  return s;
}

std::vector<double> losses(const std::string& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

TEST(OffloadCli, AKilledRunResumesExactlyIntoOffloadedState) {
  const std::string base = kiri::testing::temp_dir("kill");
  const std::string whole = base + "/whole", parts = base + "/parts";
  Result r = run_kiri("train" + offload_run(whole) + " --set train.steps=6");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_FALSE(fs::exists(whole + "/offload/rank00000")) << "swap files left at a clean exit";
  r = run_kiri("train" + offload_run(parts) + " --set train.steps=6 --set checkpoint.every=2",
               "KIRI_FAULT=kill:0:5");
  ASSERT_NE(r.code, 0) << r.output;
  // SIGKILL in the run: its swap files stay (the resume reuses them, rewritten from step 4).
  EXPECT_TRUE(fs::exists(parts + "/offload/rank00000/unit00000.exp_avg.swp"));
  r = run_kiri("train --resume " + parts + "/checkpoints");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
  const std::vector<double> a = losses(whole + "/metrics.jsonl"),
                            b = losses(parts + "/metrics.jsonl");
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // bit-exact
  EXPECT_FALSE(fs::exists(parts + "/offload/rank00000"));
  fs::remove_all(base);
}

// Saved with the optimizer and parameters on NVMe under ZeRO-3 on 2 ranks (fp32: the values
// are the weights, streamed from the parameters' swap files); resumed on one process in
// memory (the same global batch by accumulation), and on 2 ranks at ZeRO-1 with the
// optimizer offloaded: the same next losses (1e-6 relative).
TEST(OffloadCli, ACheckpointSavedWithOffloadResumesWithoutItAndOnAnotherLayout) {
  const std::string base = kiri::testing::temp_dir("layouts");
  const std::string saved = base + "/saved";
  Result r = run_kiri("launch -n 2 --threads 1 -- train" + offload_run(saved, "fp32") +
                      " --set train.steps=5 --set checkpoint.every=3 --set parallel.zero_stage=3"
                      " --set offload.parameters=nvme");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> ref = losses(saved + "/metrics.jsonl");
  ASSERT_EQ(ref.size(), 5u);
  const std::string ckpt = saved + "/checkpoints/step_00000003";
  ASSERT_TRUE(fs::exists(ckpt)) << r.output;
  for (const std::string& how :
       {std::string("train --resume ") + ckpt + " --set run.dir=" + base + "/one" +
            " --set offload.optimizer=none --set offload.parameters=none --set "
            "parallel.zero_stage=0 --set train.grad_accum=2",
        std::string("launch -n 2 --threads 1 -- train --resume ") + ckpt + " --set run.dir=" +
            base + "/two --set parallel.zero_stage=1 --set offload.parameters=none"}) {
    r = run_kiri(how);
    ASSERT_EQ(r.code, 0) << how << ": " << r.output;
    const std::string dir = how.find("/one") != std::string::npos ? base + "/one" : base + "/two";
    const std::vector<double> got = losses(dir + "/metrics.jsonl");
    ASSERT_GE(got.size(), 2u) << how;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(got[got.size() - 2 + i], ref[3 + i], 1e-6 * ref[3 + i])
          << how << " step " << 4 + i;
  }
  fs::remove_all(base);
}

}  // namespace
