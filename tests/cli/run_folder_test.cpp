// kiri train and its run folder, end to end: a used folder is refused, --overwrite starts
// over, --resume auto continues, --resume takes the checkpoint's config (a contradicting
// shape is named), the metrics and the plot cover the whole run; dp is inferred on 2 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "kiri/train/run_dir.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;
using kiri::testing::run_kiri;

// A byte-level model of a non-default shape (2 layers of 32) in run folder `dir`.
std::string run_in(const std::string& dir) {
  return " --set data.tokenizer=byte --set model.n_layer=2 --set model.n_embd=32"
         " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
         " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
         " --set run.dir=" +
         dir;
}

std::vector<nlohmann::json> metrics_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<int64_t> steps_of(const std::vector<nlohmann::json>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r["step"].get<int64_t>());
  return out;
}

bool has(const Result& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

TEST(RunFolder, AFreshRunRefusesAUsedFolderAndOverwriteStartsOver) {
  const std::string dir = kiri::testing::fresh_temp_dir("kiri_run_folder", "used") + "/run";
  Result r = run_kiri("train" + run_in(dir) + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
  EXPECT_TRUE(fs::exists(dir + "/metrics.png"));
  EXPECT_TRUE(fs::is_directory(dir + "/checkpoints/step_00000002"));
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  EXPECT_EQ(config["model"]["n_layer"], 2);
  EXPECT_EQ(config["parallel"]["dp"], 1);  // resolved
  EXPECT_EQ(config["checkpoint"]["dir"], dir + "/checkpoints");

  r = run_kiri("train" + run_in(dir) + " --set train.steps=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, dir + " already holds a run (checkpoints up to step 2, metrics up to step 2); "
                           "continue it with --resume auto, or start over with --overwrite"))
      << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2}));

  std::ofstream(dir + "/notes.txt") << "the user's";
  r = run_kiri("train" + run_in(dir) + " --set train.steps=3 --overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "--overwrite: removed " + dir + "/checkpoints/step_00000002")) << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_00000002"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_00000003"));
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_EQ(run_kiri("train" + run_in(dir) + " --overwrite --resume auto").code, 2);
}

// One uninterrupted run of 6 steps, and one killed before step 6 (checkpoints every 2, so
// at 2 and 4; metrics rows 1..5) and continued by a bare --resume: the shape comes from
// state.json, row 5 of the killed attempt is dropped, and steps 1..6 have the same losses.
TEST(RunFolder, ABareResumeContinuesANonDefaultShapeExactly) {
  const std::string base = kiri::testing::fresh_temp_dir("kiri_run_folder", "resume");
  const std::string whole = base + "/whole", parts = base + "/parts";
  Result r = run_kiri("train" + run_in(whole) + " --set train.steps=6");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri("train" + run_in(parts) + " --set train.steps=6 --set checkpoint.every=2",
               "KIRI_FAULT=kill:0:5");
  ASSERT_NE(r.code, 0) << r.output;
  ASSERT_EQ(steps_of(metrics_rows(parts + "/metrics.jsonl")),
            (std::vector<int64_t>{1, 2, 3, 4, 5}));

  r = run_kiri("train --resume " + parts + "/checkpoints --set model.n_layer=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "model.n_layer = 3 contradicts the checkpoint's model.n_layer = 2"))
      << r.output;

  r = run_kiri("train --resume " + parts + "/checkpoints");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "at step 4")) << r.output;
  EXPECT_TRUE(has(r, "dropped 1 row(s)")) << r.output;
  const auto a = metrics_rows(whole + "/metrics.jsonl"), b = metrics_rows(parts + "/metrics.jsonl");
  ASSERT_EQ(steps_of(b), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;  // bit-exact
    EXPECT_EQ(a[i]["lr"], b[i]["lr"]) << "step " << i + 1;
  }
  // The plot is drawn from the whole file: both attempts, steps 1..6.
  const auto series =
      kiri::train::loss_plot_series(kiri::train::read_loss_history(parts + "/metrics.jsonl"));
  EXPECT_EQ(series[0].x, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(series[1].x, (std::vector<double>{6}));  // eval_every 0: at the end
  EXPECT_TRUE(fs::exists(parts + "/metrics.png"));
}

TEST(RunFolder, ResumeAutoStartsFreshThenContinues) {
  const std::string dir = kiri::testing::fresh_temp_dir("kiri_run_folder", "auto") + "/run";
  Result r = run_kiri("train" + run_in(dir) + " --set train.steps=2 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "--resume auto: no checkpoint in " + dir + "/checkpoints: starting fresh"))
      << r.output;
  r = run_kiri("train --set run.dir=" + dir + " --set train.steps=4 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "resumed from " + dir + "/checkpoints/step_00000002 at step 2")) << r.output;
  EXPECT_TRUE(has(r, "step      4/4")) << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2, 3, 4}));
}

// kiri launch -n 2 -- train with parallel.dp unset runs dp 2, and rescales the rates.
TEST(RunFolder, LaunchInfersDpAndScalesTheLearningRate) {
  const std::string dir = kiri::testing::fresh_temp_dir("kiri_run_folder", "launch") + "/run";
  Result r = run_kiri("launch -n 2 --threads 1 -- train" + run_in(dir) +
                          " --set train.steps=1 --set train.lr_scaling=linear"
                          " --set train.base_batch=2 --set train.lr=1e-3 --set train.min_lr=1e-4"
                          " --set train.warmup=0",
                      "ASAN_OPTIONS=detect_leaks=0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "layout: dp 2 inferred = world 2 / (tp 1 x pp 1)")) << r.output;
  EXPECT_TRUE(has(r, "lr 0.001 x (4/2) = 0.002")) << r.output;
  const auto rows = metrics_rows(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0]["lr"].get<double>(), 2e-3);
}

}  // namespace
