// The run folder, inferred layouts and learning-rate scaling, on the Trainer and the
// functions kiri train uses (tests/cli/run_folder_test.cpp runs the binary).
#include "kiri/train/run_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "kiri/comm/local/local.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/trainer.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

using kiri::testing::error_of;

using kiri::testing::temp_dir;

std::vector<nlohmann::json> metrics_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

TEST(RunPaths, DefaultsLieInTheRunFolderAndGivenPathsWin) {
  RunConfig c = resolve_run_paths(default_run_config());
  EXPECT_EQ(c.run.dir, "runs/kiri");
  EXPECT_EQ(c.checkpoint.dir, "runs/kiri/checkpoints");
  EXPECT_EQ(c.log.metrics, "runs/kiri/metrics.jsonl");
  EXPECT_EQ(plot_path(c.log), "runs/kiri/metrics.png");
  RunConfig d = default_run_config();
  d.run.name = "gpt-a";
  d.log.metrics = "elsewhere/m.jsonl";
  d.log.trace = "{run.dir}/trace.json";
  d = resolve_run_paths(d);
  EXPECT_EQ(d.checkpoint.dir, "runs/gpt-a/checkpoints");
  EXPECT_EQ(d.log.metrics, "elsewhere/m.jsonl");
  EXPECT_EQ(plot_path(d.log), "elsewhere/m.png");
  EXPECT_EQ(d.log.trace, "runs/gpt-a/trace.json");
  EXPECT_EQ(resolve_run_paths(d).checkpoint.dir, d.checkpoint.dir);  // idempotent
  d.run.name = "a/b";
  EXPECT_NE(error_of([&] { resolve_run_paths(d); }).find("run.name must be"), std::string::npos);
}

TEST(LayoutInference, NotesTheInferredDpAndNamesEveryNumberOfABadWorld) {
  Layout p{.dp = 0};
  p.tp = 2;
  EXPECT_EQ(resolve_layout(p, 8).value_or(""), "layout: dp 4 inferred = world 8 / (tp 2 x pp 1)");
  EXPECT_EQ(p.dp, 4);
  EXPECT_FALSE(resolve_layout(p, 8).has_value());  // given (now resolved): no note
  Layout odd{.dp = 0};
  odd.tp = 2;
  odd.pp = 2;
  ErrorKind kind = ErrorKind::kInternal;
  const std::string e = error_of([&] { resolve_layout(odd, 6); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_NE(e.find("cannot infer parallel.dp: world 6 is not a multiple of tp 2 x pp 2 = 4"),
            std::string::npos)
      << e;
  Layout given;
  given.dp = 2;
  const std::string m = error_of([&] { resolve_layout(given, 4); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_NE(m.find("parallel.dp x tp x pp = 2 x 1 x 1 = 2 but the world has 4 process(es) (leave "
                   "parallel.dp unset to infer dp = world 4 / (tp 1 x pp 1) = 4)"),
            std::string::npos)
      << m;
}

// The same 4 steps on 2 thread ranks with dp unset and with dp = 2: the same losses, bit for bit.
TEST(LayoutInference, InferredDpOnTwoRanksEqualsAnExplicitDp2) {
  std::vector<double> losses[2];
  for (int explicit_dp : {0, 2}) {
    std::mutex mu;
    comm::run_local(2, [&](comm::Communicator& world) {
      RunConfig c = equivalence_config(1, 2, 32, 2);
      c.train.steps = 4;
      c.parallel.dp = explicit_dp;
      Trainer t(c, world);
      EXPECT_EQ(t.config().parallel.dp, 2);
      EXPECT_EQ(t.dims().shape().dp, 2);
      std::vector<double> mine;
      for (int s = 0; s < 4; ++s) mine.push_back(t.train_step().loss);
      std::lock_guard<std::mutex> lock(mu);
      if (world.rank() == 0) losses[explicit_dp == 2] = mine;
    });
  }
  ASSERT_EQ(losses[0].size(), 4u);
  EXPECT_EQ(losses[0], losses[1]);
}

TEST(LayoutInference, ANonDividingWorldStopsTheTrainerWithOneNamedError) {
  std::mutex mu;
  std::vector<std::string> errors;
  comm::run_local(3, [&](comm::Communicator& world) {
    RunConfig c = equivalence_config(1, 2, 32, 2);
    c.parallel.tp = 2;
    ErrorKind kind = ErrorKind::kInternal;
    const std::string e = error_of([&] { Trainer t(c, world); }, &kind);
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(kind, ErrorKind::kConfig) << e;
    errors.push_back(e);
  });
  ASSERT_EQ(errors.size(), 3u);
  for (const std::string& e : errors)
    EXPECT_NE(e.find("world 3 is not a multiple of tp 2 x pp 1 = 2"), std::string::npos) << e;
}

TEST(LrScaling, TheLineNamesTheFactorAndApplyingTwiceChangesNothing) {
  TrainConfig t;
  t.optimizer.lr = 6e-4;
  t.min_lr = 6e-5;
  t.lr_scaling = LrScaling::kLinear;
  t.base_batch = 32;
  EXPECT_EQ(scale_learning_rate(t, 64),
            "lr 0.0006 x (64/32) = 0.0012, min_lr 6e-05 -> 0.00012 (train.lr_scaling linear, "
            "train.base_batch 32; global batch 64 sequences)");
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 1.2e-3);
  EXPECT_DOUBLE_EQ(t.min_lr, 1.2e-4);
  scale_learning_rate(t, 64);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 1.2e-3);
  TrainConfig none;
  EXPECT_EQ(scale_learning_rate(none, 64), "");
  EXPECT_DOUBLE_EQ(none.optimizer.lr, TrainConfig{}.optimizer.lr);
}

// micro_batch 4 x grad_accum 2 = 8 sequences per step against base_batch 2: linear scales the
// rates by 4, sqrt by 2, and the metrics' lr is the scaled schedule's.
TEST(LrScaling, TheMetricsLrIsTheScaledSchedule) {
  const std::string dir = temp_dir("lr");
  for (auto [scaling, factor] :
       {std::pair{LrScaling::kNone, 1.0}, std::pair{LrScaling::kLinear, 4.0},
        std::pair{LrScaling::kSqrt, 2.0}}) {
    RunConfig c = equivalence_config(1, 2, 32, 4);
    c.train.steps = 4;
    c.train.grad_accum = 2;
    c.train.lr_scaling = scaling;
    c.train.base_batch = 2;
    c.log.metrics = dir + "/m" + std::to_string(static_cast<int>(scaling)) + ".jsonl";
    {
      Trainer t(c);
      t.run();
    }
    const std::vector<nlohmann::json> rows = metrics_rows(c.log.metrics);
    ASSERT_EQ(rows.size(), 4u);
    for (int s = 0; s < 4; ++s)
      EXPECT_DOUBLE_EQ(rows[s]["lr"].get<double>(),
                       optim::lr_at(s, 3e-3 * factor, 2, 4, 3e-4 * factor))
          << "step " << s + 1 << " factor " << factor;
  }
  fs::remove_all(dir);
}

// An attempt of 6 steps (checkpoints at 3 and 6) resumed from step 3 for 8 steps: the
// metrics hold steps 1..8 once (4..8 of the second attempt), and the plot's series
// cover steps 1..8.
TEST(RunDir, AResumedRunKeepsEachStepOnceAndPlotsTheWholeHistory) {
  const std::string dir = temp_dir("resume");
  RunConfig c = equivalence_config(1, 2, 32, 2);
  c.train.steps = 6;
  c.train.eval_every = 3;
  c.train.eval_batches = 1;
  c.checkpoint.dir = dir + "/checkpoints";
  c.checkpoint.every = 3;
  c.checkpoint.keep_last = 0;
  c.log.metrics = dir + "/metrics.jsonl";
  {
    Trainer t(c);
    t.run();
  }
  const std::vector<nlohmann::json> first = metrics_rows(c.log.metrics);
  ASSERT_EQ(first.size(), 6u);
  c.train.steps = 8;
  {
    Trainer t(c);
    t.load_checkpoint(c.checkpoint.dir + "/step_00000003");
    t.run();
  }
  const std::vector<nlohmann::json> rows = metrics_rows(c.log.metrics);
  ASSERT_EQ(rows.size(), 8u);
  for (int s = 0; s < 8; ++s) EXPECT_EQ(rows[s]["step"], s + 1);
  // Step 4's loss is the checkpoint's model's: the same bits in both attempts (the
  // schedule over 8 steps then changes the updates).
  for (int s = 0; s < 4; ++s) EXPECT_EQ(rows[s]["loss"], first[s]["loss"]) << s;
  EXPECT_NE(rows[4]["lr"], first[4]["lr"]);
  const std::vector<plot::Series> series = loss_plot_series(read_loss_history(c.log.metrics));
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].x, (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(series[1].x, (std::vector<double>{3, 6, 8}));
  for (int s = 0; s < 8; ++s) EXPECT_EQ(series[0].y[s], rows[s]["loss"].get<double>()) << s;
  EXPECT_TRUE(fs::exists(dir + "/metrics.png"));
  fs::remove_all(dir);
}

TEST(RunDir, KeepMetricsThroughDropsLaterRowsDuplicatesAndATornLine) {
  const std::string dir = temp_dir("keep");
  const std::string path = dir + "/m.jsonl";
  std::ofstream(path)
      << "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"loss\":3.5}\n"
         "{\"step\":3,\"loss\":3}\n{\"step\":4,\"lo";
  EXPECT_EQ(keep_metrics_through(path, 2), 3);
  const std::vector<nlohmann::json> rows = metrics_rows(path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["loss"], 3.5);  // the later row of a step
  EXPECT_EQ(keep_metrics_through(path, 2), 0);
  EXPECT_EQ(keep_metrics_through(dir + "/missing.jsonl", 2), 0);
  EXPECT_FALSE(fs::exists(dir + "/missing.jsonl"));
  fs::remove_all(dir);
}

TEST(RunDir, AUsedFolderIsNamedAndOverwriteRemovesOnlyKirisFiles) {
  const std::string dir = temp_dir("used");
  RunConfig c = default_run_config();
  c.run.dir = dir + "/run";
  c = resolve_run_paths(c);
  EXPECT_FALSE(inspect_run_dir(c).holds_a_run());
  refuse_used_run_dir(c);  // nothing there yet
  fs::create_directories(c.checkpoint.dir + "/step_00000200");
  fs::create_directories(c.checkpoint.dir + "/.step_00000300.tmp");
  std::ofstream(c.checkpoint.dir + "/latest") << "step_00000200\n";
  std::ofstream(c.checkpoint.dir + "/notes.txt") << "mine";
  std::ofstream(c.log.metrics) << "{\"step\":199}\n{\"step\":200}\n";
  std::ofstream(dir + "/run/metrics.png") << "png";
  std::ofstream(dir + "/run/data.txt") << "mine";
  ErrorKind kind = ErrorKind::kInternal;
  const std::string e = error_of([&] { refuse_used_run_dir(c); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_NE(e.find(c.run.dir + " already holds a run (checkpoints up to step 200, metrics up to "
                               "step 200); continue it with --resume auto, or start over with "
                               "--overwrite"),
            std::string::npos)
      << e;
  // A metrics file outside run.dir and checkpoint.dir is not removed.
  RunConfig outside = c;
  outside.log.metrics = dir + "/other.jsonl";
  std::ofstream(outside.log.metrics) << "{\"step\":1}\n";
  EXPECT_EQ(clear_run_dir(outside).size(), 3u);  // step_, .tmp, latest
  EXPECT_TRUE(fs::exists(outside.log.metrics));
  EXPECT_TRUE(fs::exists(c.log.metrics));
  // log.csv's and log.tensorboard's files in run.dir go too.
  std::ofstream(dir + "/run/metrics.csv") << "step,loss\n";
  const std::string events = dir + "/run/events.out.tfevents.1700000000.h.1.0";
  std::ofstream(events) << "tfrecords";
  EXPECT_EQ(clear_run_dir(c).size(), 4u);  // metrics.jsonl, metrics.png, metrics.csv, events
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.png"));
  EXPECT_FALSE(fs::exists(dir + "/run/metrics.csv"));
  EXPECT_FALSE(fs::exists(events));
  EXPECT_FALSE(inspect_run_dir(c).holds_a_run());
  EXPECT_TRUE(fs::exists(c.checkpoint.dir + "/notes.txt"));
  EXPECT_TRUE(fs::exists(dir + "/run/data.txt"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::train
