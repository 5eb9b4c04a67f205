// MFU against the peak FLOP/s, mfu_gemm against the GEMM rate, and the
// progress line's elapsed time and ETA (docs/metrics.md).
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/comm/local/local.h"
#include "kiri/kernels/peak.h"
#include "kiri/train/metrics.h"
#include "kiri/train/trainer.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

struct MetricsRun {
  std::vector<nlohmann::json> rows;
  double flops_per_token = 0;  // the resolved model's (byte vocabulary)
};

// A 5-step byte-level run writing a metrics file; its rows. `measured` > 0: the trainer's
// start-up measurement is taken to have returned it (a loaded machine's low peak).
MetricsRun run_rows(const std::string& name, double peak = 0, double measured = 0) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiri_mfu_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig c = byte_test_config(2, 2, 32, 4);
  c.train.steps = 5;
  c.train.warmup = 1;
  c.train.eval_every = 0;
  c.train.eval_batches = 1;
  c.log.every = 1;
  c.log.metrics = (dir / "metrics.jsonl").string();
  c.log.plot = (dir / "loss.png").string();
  Trainer t(c);
  if (peak > 0) t.set_peak_flops(peak);
  if (measured > 0) t.assume_measured_peak(measured, "under load");
  t.run();
  MetricsRun run;
  run.flops_per_token = t.config().model.flops_per_token(c.train.seq_len);
  std::ifstream in(c.log.metrics);
  for (std::string line; std::getline(in, line);) run.rows.push_back(nlohmann::json::parse(line));
  fs::remove_all(dir);
  return run;
}

// The measured peak is a true upper bound: every row's MFU is in (0, 1], and
// it is model FLOPs/s over the fp32 FMA peak on this process's threads.
TEST(Mfu, MeasuredPeakBoundsEveryRowOfARealRun) {
  const MetricsRun run = run_rows("measured");
  const std::vector<nlohmann::json>& rows = run.rows;
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_GT(run.flops_per_token, 0);
  const double peak = kernels::peak_flops(DType::kF32, omp_get_max_threads());
  double last_elapsed = 0;
  for (const nlohmann::json& r : rows) {
    const double mfu = r["mfu"].get<double>();
    EXPECT_GT(mfu, 0) << r.dump();
    EXPECT_LE(mfu, 1.0) << r.dump();
    const double model_flops_per_s = run.flops_per_token * r["tokens_per_s"].get<double>();
    EXPECT_NEAR(mfu, model_flops_per_s / peak, 1e-9 * mfu) << r.dump();
    EXPECT_GT(r["mfu_gemm"].get<double>(), 0) << r.dump();
    // The GEMM rate is below the FMA peak, so mfu_gemm is the larger ratio.
    EXPECT_GE(r["mfu_gemm"].get<double>(), mfu) << r.dump();
    const double elapsed = r["elapsed_s"].get<double>();
    EXPECT_GE(elapsed, last_elapsed) << r.dump();
    EXPECT_GE(elapsed, r["step_s"].get<double>()) << r.dump();
    last_elapsed = elapsed;
    ASSERT_TRUE(r.contains("eta_s")) << r.dump();
    EXPECT_GE(r["eta_s"].get<double>(), 0) << r.dump();
  }
  EXPECT_EQ(rows.back()["eta_s"].get<double>(), 0);  // no steps left
}

// A given peak is used exactly, even one so low that MFU passes 1 (then the
// trainer warns that the peak is wrong, and reports the number unclamped).
TEST(Mfu, GivenPeakIsUsedExactly) {
  for (double peak : {2.5e12, 1e6}) {
    const MetricsRun run = run_rows("given", peak);
    ASSERT_EQ(run.rows.size(), 5u);
    for (const nlohmann::json& r : run.rows) {
      const double expected = run.flops_per_token * r["tokens_per_s"].get<double>() / peak;
      EXPECT_NEAR(r["mfu"].get<double>(), expected, 1e-12 * expected) << peak << " " << r.dump();
    }
  }
}

// A start-up peak measured while other processes held the cores can be below what a step
// then computes: the peak is measured again and never kept below the achieved rate, so MFU
// stays at most 1, and the warning says so and names --peak-flops.
TEST(Mfu, MeasuredPeakBelowTheAchievedRateIsMeasuredAgain) {
  ::testing::internal::CaptureStderr();
  const MetricsRun run = run_rows("remeasured", 0, /*measured=*/1e6);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(run.rows.size(), 5u);
  for (const nlohmann::json& r : run.rows) {
    EXPECT_GT(r["mfu"].get<double>(), 0) << r.dump();
    EXPECT_LE(r["mfu"].get<double>(), 1.0) << r.dump();
  }
  EXPECT_NE(log.find("the peak measured at start, 0.001 GFLOP/s per rank, is below the "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("model GFLOP/s this rank computed at step 1 (other processes shared its "
                     "cores while it was measured); measured again: "),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("give the hardware's peak with --peak-flops F (FLOP/s per rank)"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("> 1 at step"), std::string::npos) << log;
}

TEST(Mfu, BadPeakIsAConfigError) {
  Trainer t(byte_test_config(1, 1, 16, 1));
  for (double bad : {0.0, -1e12, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    try {
      t.set_peak_flops(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find("--peak-flops must be a positive"), std::string::npos);
    }
  }
  EXPECT_THROW(model_flops_utilization(1e9, 0), Error);
}

// One token count for every layout: a step's `tokens` in metrics.jsonl is the tokens the
// world read for it (every distinct training sample any rank filled, x seq_len), and
// tokens_per_s and mfu follow from it and the step's time.
struct TokenLayout {
  int dp = 1, tp = 1, pp = 1, microbatches = 1, grad_accum = 1;
};

void expect_tokens_are_the_samples_read(const TokenLayout& k) {
  const std::string name = "dp" + std::to_string(k.dp) + "tp" + std::to_string(k.tp) + "pp" +
                           std::to_string(k.pp) + "m" + std::to_string(k.microbatches) + "a" +
                           std::to_string(k.grad_accum);
  SCOPED_TRACE(name);
  const std::string dir = kiri::testing::temp_dir(name);
  const int ranks = k.dp * k.tp * k.pp, steps = 2;
  const double peak = 1e12;  // given: MFU checked exactly
  RunConfig c = byte_test_config(4, 2, 32, 2);
  c.train.steps = steps;
  c.train.warmup = 1;
  c.train.eval_every = 0;
  c.train.eval_batches = 1;
  c.train.grad_accum = k.grad_accum;
  c.parallel.dp = k.dp;
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.microbatches = k.microbatches;
  c.log.metrics = dir + "/metrics.jsonl";
  std::mutex mu;
  std::set<uint64_t> samples;  // every training sample any rank filled
  double flops_per_token = 0;
  omp_set_num_threads(1);
  comm::run_local(ranks, [&](comm::Communicator& world) {
    omp_set_num_threads(1);
    Trainer t(c, world);
    t.set_peak_flops(peak);
    t.set_sample_observer([&](uint64_t first, int64_t count) {
      std::lock_guard<std::mutex> lock(mu);
      for (int64_t i = 0; i < count; ++i) samples.insert(first + static_cast<uint64_t>(i));
    });
    t.run();
    if (world.rank() == 0) flops_per_token = t.config().model.flops_per_token(c.train.seq_len);
  });
  const int64_t read = static_cast<int64_t>(samples.size()) * c.train.seq_len / steps;
  // micro_batch 2 x microbatches x grad_accum x dp sequences of 32 tokens.
  EXPECT_EQ(read, 2 * k.microbatches * k.grad_accum * k.dp * 32);
  std::ifstream in(c.log.metrics);
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const nlohmann::json r = nlohmann::json::parse(line);
    EXPECT_EQ(r["tokens"].get<int64_t>(), read) << line;
    const double tps = r["tokens_per_s"].get<double>();
    EXPECT_NEAR(tps, read / r["step_s"].get<double>(), 1e-9 * tps) << line;
    const double mfu = flops_per_token * tps / ranks / peak;
    EXPECT_NEAR(r["mfu"].get<double>(), mfu, 1e-9 * mfu) << line;
  }
  EXPECT_EQ(rows, steps);
}

TEST(TokensPerStep, Pp2With1And4And8MicroBatches) {
  for (int m : {1, 4, 8}) expect_tokens_are_the_samples_read({.pp = 2, .microbatches = m});
}

TEST(TokensPerStep, Pp4With1And4And8MicroBatches) {
  for (int m : {1, 4, 8}) expect_tokens_are_the_samples_read({.pp = 4, .microbatches = m});
}

TEST(TokensPerStep, DpWithAccumulationTpAndDpByPp) {
  expect_tokens_are_the_samples_read({.dp = 2, .grad_accum = 3});
  expect_tokens_are_the_samples_read({.tp = 2});
  expect_tokens_are_the_samples_read({.dp = 2, .pp = 2, .microbatches = 4, .grad_accum = 2});
}

TEST(ProgressLine, ShowsElapsedAndEta) {
  StepMetrics m;
  m.step = 40;
  m.total_steps = 100;
  m.elapsed_s = 83.4;
  m.eta_s = 125.9;
  const std::string line = progress_line(m, /*verbose=*/true);
  EXPECT_NE(line.find("| elapsed 1m23s | eta 2m05s"), std::string::npos) << line;
  EXPECT_NE(progress_line(m).find("| eta 2m05s"), std::string::npos) << progress_line(m);
  EXPECT_EQ(progress_line(m).find("elapsed"), std::string::npos) << progress_line(m);
  m.eta_s.reset();  // no ETA before the first step's time is known
  EXPECT_EQ(progress_line(m, true).find("eta"), std::string::npos) << progress_line(m, true);
  const nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_DOUBLE_EQ(j["elapsed_s"].get<double>(), 83.4);
  EXPECT_FALSE(j.contains("eta_s"));
}

// Every field at once, with long values: the short line stays within 120 columns and keeps
// the step, the losses and tokens/s, dropping the least important fields; --verbose has all.
TEST(ProgressLine, FitsIn120ColumnsAndVerboseShowsEveryField) {
  StepMetrics m;
  m.step = 123456;
  m.total_steps = 1000000;
  m.loss = 10.123456;
  m.val_loss = 10.654321;
  m.lr = 3e-4;
  m.grad_norm = 123.456;
  m.tokens_per_s = 1234567;
  m.mfu = 0.456;
  m.mem.allocated = int64_t{123} << 30;
  m.mem.peak_allocated = int64_t{456} << 30;
  m.mem.nvme = {0, 0, int64_t{3} << 40, 0, 0, 0};
  m.offload_read_bytes = 1 << 30;
  m.offload_written_bytes = 1 << 30;
  m.elapsed_s = 123456;
  m.eta_s = 654321;
  m.bubble = 0.25;
  m.loss_scale = 65536;
  m.skipped_steps = 12;
  const std::string line = progress_line(m);
  EXPECT_LE(line.size(), kProgressColumns) << line;
  for (const char* kept : {"step 123456/1000000", "loss 10.1235", "val 10.6543", "lr 3.00e-04",
                           "1234567 tok/s", "mfu 45.6%"})
    EXPECT_NE(line.find(kept), std::string::npos) << kept << " in " << line;
  EXPECT_EQ(line.find("bubble"), std::string::npos) << line;  // the first to go
  const std::string all = progress_line(m, /*verbose=*/true);
  for (const char* field : {"norm 123.456", "(peak 456.00 GiB)", "nvme 3.00 TiB", "io r",
                            "elapsed 34h17m36s", "eta", "bubble 25.0%", "scale 65536 | skipped 12"})
    EXPECT_NE(all.find(field), std::string::npos) << field << " in " << all;
  // A typical line keeps every short field.
  StepMetrics t;
  t.step = 20;
  t.total_steps = 30;
  t.eta_s = 41;
  t.mem.peak_allocated = 508 << 20;
  const std::string typical = progress_line(t);
  for (const char* field : {"norm", "mem 508.00 MiB", "eta 41s"})
    EXPECT_NE(typical.find(field), std::string::npos) << field << " in " << typical;
  // A slow link is named on a line of its own.
  t.link_bytes_per_s = {{"nodeA", 100e6}, {"nodeB", 10e6}};
  t.slow_hosts = {"nodeB"};
  const std::string slow = progress_line(t);
  EXPECT_NE(slow.find("\n  slow link: nodeB "), std::string::npos) << slow;
}

TEST(ProgressLine, FormatsDurations) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(7.9), "7s");
  EXPECT_EQ(format_duration(60), "1m00s");
  EXPECT_EQ(format_duration(125.9), "2m05s");
  EXPECT_EQ(format_duration(3600 + 2 * 60 + 9), "1h02m09s");
  EXPECT_EQ(format_duration(-5), "0s");
}

// The ETA is the mean of the last `window` steps times the steps left.
TEST(ProgressLine, EtaFromTheMeanOfRecentSteps) {
  StepClock clock(3);
  EXPECT_FALSE(clock.eta(10).has_value());
  clock.add(100);  // a slow first step leaves the window
  for (double s : {1.0, 2.0, 3.0}) clock.add(s);
  EXPECT_DOUBLE_EQ(*clock.eta(10), 20.0);
  EXPECT_DOUBLE_EQ(*clock.eta(0), 0.0);
  // mark: the elapsed time since the clock began, the ETA from the marks' intervals.
  StepClock run;
  StepMetrics m;
  run.mark(m, 4);
  EXPECT_GE(m.elapsed_s, 0);
  ASSERT_TRUE(m.eta_s.has_value());
  EXPECT_NEAR(*m.eta_s, 4 * m.elapsed_s, 1e-12);
  const double first = m.elapsed_s;
  run.mark(m, 0);
  EXPECT_GE(m.elapsed_s, first);
  EXPECT_EQ(*m.eta_s, 0);
}

}  // namespace
}  // namespace kiri::train
