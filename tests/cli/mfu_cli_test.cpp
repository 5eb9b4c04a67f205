// kiri train/bench --peak-flops end to end, and the progress line's elapsed
// time and ETA (docs/metrics.md).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "kiri/model/gpt.h"
#include "test_paths.h"

namespace {

using kiri::testing::Result;
using kiri::testing::run_kiri;

// configs/tiny-byte.json's model: 2 x 64, 4 heads, the byte vocabulary (257), T 64.
double tiny_byte_flops_per_token() {
  kiri::GPTConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 64;
  m.vocab_size = 257;  // 256 bytes and the end-of-text token
  m.block_size = 64;
  return m.flops_per_token(64);
}

TEST(CliMfu, TrainUsesTheGivenPeakAndPrintsElapsedAndEta) {
  const std::string dir = kiri::testing::temp_dir("train");
  const std::string metrics = dir + "/m.jsonl";
  const Result r = run_kiri("train " + std::string(KIRI_SOURCE_DIR) +
                            "/configs/tiny-byte.json --set train.steps=3 --set train.warmup=1"
                            " --set train.eval_batches=1 --set log.every=1 --set checkpoint.dir="
                            " --set log.metrics=" +
                            metrics + " --peak-flops 2.5e12 --verbose");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("peak of 2500 GFLOP/s per rank (given (--peak-flops))"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step      1/3 |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| elapsed "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| eta "), std::string::npos) << r.output;
  std::ifstream in(metrics);
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const double expected = tiny_byte_flops_per_token() * j["tokens_per_s"].get<double>() / 2.5e12;
    EXPECT_NEAR(j["mfu"].get<double>(), expected, 1e-12 * expected) << line;
    EXPECT_GT(j["elapsed_s"].get<double>(), 0) << line;
  }
  EXPECT_EQ(rows, 3);
  std::filesystem::remove_all(dir);
}

// Two busy loops on the cores for the length of a short run (the start-up peak is measured
// while they run): every row's MFU is at most 1, and when the peak had to be raised the
// warning says so and names --peak-flops. Timing: it loads the machine, so it runs alone.
TEST(CliMfuTiming, AtMostOneWithTwoBusyLoopsOnTheCores) {
  const std::string dir = kiri::testing::temp_dir("busy");
  const std::string metrics = dir + "/m.jsonl";
  std::vector<pid_t> loops;
  for (int i = 0; i < 2; ++i) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    loops.push_back(pid);
  }
  // 256-wide blocks: a GEMM-bound step, whose rate comes closest to the peak.
  const Result r = run_kiri("train " + std::string(KIRI_SOURCE_DIR) +
                            "/configs/tiny-byte.json --set model.n_embd=256 --set train.steps=4"
                            " --set train.micro_batch=8 --set train.warmup=1"
                            " --set train.eval_batches=1 --set log.every=1 --set checkpoint.dir="
                            " --set log.metrics=" +
                            metrics);
  for (const pid_t pid : loops) {  // only the loops this test started
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(metrics);
  int rows = 0;
  for (std::string line; std::getline(in, line); ++rows) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_GT(j["mfu"].get<double>(), 0) << line;
    EXPECT_LE(j["mfu"].get<double>(), 1.0) << line;
  }
  EXPECT_EQ(rows, 4);
  if (r.output.find("the peak measured at start") != std::string::npos) {
    EXPECT_NE(r.output.find("give the hardware's peak with --peak-flops F (FLOP/s per rank)"),
              std::string::npos)
        << r.output;
  }
  EXPECT_EQ(r.output.find("> 1 at step"), std::string::npos) << r.output;
}

TEST(CliMfu, BadPeakFlopsIsNamedBeforeAnyWork) {
  for (const std::string cmd : {"train", "bench --config tiny"}) {
    Result r = run_kiri(cmd + " --peak-flops 0");
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("--peak-flops must be a positive FLOP/s per rank (e.g. 2.5e12), got 0"),
              std::string::npos)
        << r.output;
    r = run_kiri(cmd + " --peak-flops fast");
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("--peak-flops must be a number, got 'fast'"), std::string::npos)
        << r.output;
  }
}

}  // namespace
