// One rank's failure ends the job promptly with that rank's error, printed once; weights and
// losses that are not finite are refused; every rank must resolve the same config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/checkpoint_edit.h"
#include "cli/run_kiri.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/tensor/allocator.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;

struct Timed {
  Result r;
  double seconds;
};

Timed timed(const std::string& args, const std::string& env = "") {
  const auto start = std::chrono::steady_clock::now();
  Result r = run_kiri(args, env);
  return {r, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

using kiri::testing::temp_dir;

// A tiny byte-level run in `dir` (checkpoints in dir/ck); the default 300 s collective
// timeout, so that a prompt end shows the failure did not wait for it.
std::string tiny_run(const std::string& dir) {
  return " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
         " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
         " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
         " --set run.dir=" +
         dir + " --set checkpoint.dir=" + dir + "/ck";
}

std::string only_step_dir(const std::string& ck) {
  std::string found;
  for (const auto& e : fs::directory_iterator(ck))
    if (e.path().filename().string().rfind("step_", 0) == 0) found = e.path().string();
  return found;
}

// Rewrites a safetensors file with element `index` of tensor `name` set to `value`.
void poison(const std::string& path, const std::string& name, int64_t index, float value) {
  kiri::Allocator allocator;
  const kiri::ckpt::SafetensorsFile file = kiri::ckpt::SafetensorsFile::open(path);
  std::vector<kiri::ckpt::NamedTensor> tensors;
  for (const std::string& n : file.names()) {
    kiri::Tensor t = file.get(n);
    if (n == name) t.data<float>()[index] = value;
    tensors.push_back({n, t});
  }
  // As kiri's writer would write a diverged state: checksums and manifest hold.
  kiri::ckpt::save_safetensors(path + ".new", tensors,
                               kiri::testing::without_checksums(file.metadata()),
                               kiri::ckpt::Checksums::kXxh3);
  fs::rename(path + ".new", path);
  kiri::testing::reseal_checkpoint(fs::path(path).parent_path().string());
}

// Item 4 of issue 12: a ZeRO-3 checkpoint whose state.json lists one of the two optimizer
// shards. Rank 1 cannot load its states; before, rank 0 waited in its first all-gather until
// parallel.timeout_s and rank 1's error was never printed.
TEST(RankFailure, ACheckpointThatFailsOnOneRankStopsEveryRankWithItsError) {
  const std::string dir = temp_dir("zero3");
  const std::string run = "launch -n 2 --threads 1 -- train" + tiny_run(dir) +
                          " --set parallel.zero_stage=3 --set parallel.dp=2";
  Result r = run_kiri(run + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string step = only_step_dir(dir + "/ck");
  nlohmann::json state;
  std::ifstream(step + "/state.json") >> state;
  ASSERT_EQ(state["optimizer_files"].size(), 2u);
  state["optimizer_files"].erase(1);
  std::ofstream(step + "/state.json") << state.dump(2);
  kiri::testing::reseal_checkpoint(step);  // as kiri would have written it

  const Timed t = timed(run + " --set train.steps=4 --resume auto");
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_LT(t.seconds, 15) << t.r.output;
  EXPECT_EQ(count(t.r.output, "kiri: rank 1: checkpoint error: " + step +
                                  ": the optimizer files hold 0 of the"),
            1u)
      << t.r.output;
  EXPECT_EQ(count(t.r.output, "checkpoint error"), 1u) << t.r.output;  // once, by rank 0
  EXPECT_EQ(t.r.output.find("communication timeout"), std::string::npos) << t.r.output;
  EXPECT_EQ(t.r.output.find("step      3/4"), std::string::npos) << t.r.output;
}

// An error raised on one rank in the middle of training (KIRI_FAULT=raise) ends the job
// within seconds, not at the 300 s collective timeout, with that rank's error once.
TEST(RankFailure, AnErrorOnOneRankMidRunEndsTheJobPromptly) {
  for (const char* rank : {"0", "1"}) {
    const std::string dir = temp_dir(std::string("raise") + rank);
    const Timed t =
        timed("launch -n 2 --threads 1 -- train" + tiny_run(dir) + " --set train.steps=50",
              std::string("KIRI_FAULT=raise:") + rank + ":3");
    EXPECT_EQ(t.r.code, 1) << t.r.output;
    EXPECT_LT(t.seconds, 10) << t.r.output;
    EXPECT_EQ(count(t.r.output, std::string("kiri: rank ") + rank +
                                    ": data error: KIRI_FAULT: the error injected on rank " + rank +
                                    " before step 4"),
              1u)
        << t.r.output;
    EXPECT_EQ(t.r.output.find("communication timeout"), std::string::npos) << t.r.output;
    EXPECT_EQ(t.r.output.find("step     10/50"), std::string::npos) << t.r.output;
  }
}

// Different --set flags on the two ranks (mpirun's MPMD form): a config error at start
// naming the rank and the key, printed once.
TEST(RankFailure, RanksThatResolvedDifferentConfigsAreRefused) {
  const std::string dir = temp_dir("config");
  std::string mpirun = "mpirun --oversubscribe --bind-to none";
  if (geteuid() == 0) mpirun += " --allow-run-as-root";
  const std::string one = std::string(" -n 1 -x OMP_NUM_THREADS=1 ") + KIRI_BINARY + " train" +
                          tiny_run(dir) + " --set train.steps=3";
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(("ASAN_OPTIONS=detect_leaks=0 " + mpirun + one + " --set train.lr=0.001 :" + one +
                   " --set train.lr=0.002 2>&1")
                      .c_str(),
                  "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status << "\n" << out;
  EXPECT_LT(s, 10) << out;
  EXPECT_EQ(count(out,
                  "kiri: config error: the ranks resolved different configs: rank 1's "
                  "train.lr is 0.002 here and 0.001 on rank 0 (ranks that differ from "
                  "rank 0: 1)"),
            1u)
      << out;
  EXPECT_EQ(out.find("step      1/3"), std::string::npos) << out;
}

// NaN or Inf in a checkpoint's weights or optimizer states: eval, sample and resume refuse
// it, naming the file, the tensor and the element.
TEST(RankFailure, NonFiniteCheckpointValuesAreRefused) {
  const std::string dir = temp_dir("nan");
  Result r = run_kiri("train" + tiny_run(dir) + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string step = only_step_dir(dir + "/ck");
  const std::string model = step + "/model.safetensors";
  fs::copy_file(model, dir + "/model.clean");
  poison(model, "transformer.h.0.mlp.c_fc.weight", 7, std::nanf(""));
  const std::string named = "checkpoint error: " + model +
                            ": tensor transformer.h.0.mlp.c_fc.weight holds a non-finite value "
                            "(nan) at element 7 of 4096";
  for (const std::string& cmd : {"eval " + step, "sample " + step + " --tokens 3",
                                 "train" + tiny_run(dir) + " --set train.steps=4 --resume auto"}) {
    const Timed t = timed(cmd);
    EXPECT_EQ(t.r.code, 1) << cmd << "\n" << t.r.output;
    EXPECT_NE(t.r.output.find(named), std::string::npos) << cmd << "\n" << t.r.output;
    EXPECT_LT(t.seconds, 10) << cmd;
  }
  // The resume saved nothing: the folder still holds the one checkpoint.
  EXPECT_EQ(only_step_dir(dir + "/ck"), step);

  fs::rename(dir + "/model.clean", model);
  const std::string optimizer = step + "/optimizer-00000-of-00001.safetensors";
  poison(optimizer, "exp_avg_sq", 3, INFINITY);
  const Timed t = timed("train" + tiny_run(dir) + " --set train.steps=4 --resume auto");
  EXPECT_EQ(t.r.code, 1) << t.r.output;
  EXPECT_NE(t.r.output.find("checkpoint error: " + optimizer +
                            ": tensor exp_avg_sq holds a non-finite value (inf) at element 3"),
            std::string::npos)
      << t.r.output;
  EXPECT_LT(t.seconds, 10);
}

// A loss that stays NaN (KIRI_FAULT=nan: from step 3 on, on rank 1) stops the run after
// train.max_nonfinite_steps steps, before a checkpoint of those steps; on 2 ranks, once.
TEST(RankFailure, ARunWhoseLossStaysNonFiniteStops) {
  const std::string dir = temp_dir("diverge");
  const Timed t = timed("launch -n 2 --threads 1 -- train" + tiny_run(dir) +
                            " --set train.steps=40 --set checkpoint.every=1"
                            " --set checkpoint.keep_last=0 --set train.max_nonfinite_steps=4",
                        "KIRI_FAULT=nan:1:3");
  EXPECT_EQ(t.r.code, 2) << t.r.output;
  EXPECT_LT(t.seconds, 10) << t.r.output;
  EXPECT_EQ(count(t.r.output,
                  "kiri: config error: the run diverged: 4 steps in a row (steps 3-6) had a "
                  "non-finite loss or skipped the update for non-finite gradients "
                  "(train.max_nonfinite_steps = 4)"),
            1u)
      << t.r.output;
  // Steps 1-5 were saved (3-5 skipped their updates: the weights are step 2's); step 6 not.
  EXPECT_TRUE(fs::exists(dir + "/ck/step_00000005")) << t.r.output;
  EXPECT_FALSE(fs::exists(dir + "/ck/step_00000006")) << t.r.output;
  // fp16: the dynamic scaler's skips (scale 4, then 2) are its normal back-off and do not
  // count; the skips at the minimum scale of 1 do.
  const std::string fp16 = temp_dir("diverge_fp16");
  const Timed h = timed("train" + tiny_run(fp16) +
                            " --set train.steps=30 --set checkpoint.dir= --set train.dtype=fp16"
                            " --set train.initial_scale_power=2 --set train.max_nonfinite_steps=3",
                        "KIRI_FAULT=nan:0:3");
  EXPECT_EQ(h.r.code, 2) << h.r.output;
  EXPECT_LT(h.seconds, 10) << h.r.output;
  EXPECT_NE(h.r.output.find("kiri: config error: the run diverged: 3 steps in a row (steps 5-7) "
                            "had a non-finite loss or skipped the update for non-finite "
                            "gradients at the minimum loss scale"),
            std::string::npos)
      << h.r.output;
  // 0 turns the stop off: the run finishes (every update from step 3 on skipped).
  const std::string off = temp_dir("diverge_off");
  Result r = run_kiri("train" + tiny_run(off) +
                          " --set train.steps=15 --set checkpoint.dir= --set "
                          "train.max_nonfinite_steps=0",
                      "KIRI_FAULT=nan:0:3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step     15/15"), std::string::npos) << r.output;
}

}  // namespace
