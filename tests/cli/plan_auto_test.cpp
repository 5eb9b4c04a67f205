// kiri plan --calibrate, kiri train --auto and the planner's out-of-memory advice, end to end
// (docs/planner.md, "Calibration", "kiri train --auto", "Out of memory").
#include <gtest/gtest.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;

// Leaks are not this test's subject (a killed or failed run leaves some).
Result kiri(const std::string& args, const std::string& env = "") {
  return kiri::testing::run_kiri(args, env + " ASAN_OPTIONS=detect_leaks=0");
}

using kiri::testing::temp_dir;

// 3.2 M parameters (4 x 256, byte vocabulary), 2 x 32 tokens per rank: the fp32 model states
// (49.5 MiB under DDP: 12.4 parameters + 12.4 gradients + 24.7 optimizer states) dominate.
// Measured peaks per rank on 2 ranks: DDP 54.0 MiB, ZeRO-1 43.1, ZeRO-2 45.9, ZeRO-3 42.4
// (45.9 with the evaluation), pp 2 30.0, tp 2 27.8.
std::string small_run(const std::string& dir) {
  return std::string(KIRI_SOURCE_DIR) +
         "/configs/tiny-byte.json --set model.n_layer=4 --set model.n_embd=256"
         " --set model.n_head=4 --set train.micro_batch=2 --set train.seq_len=32"
         " --set train.steps=3 --set train.warmup=1 --set train.eval_batches=2"
         " --set parallel.timeout_s=30 --set checkpoint.dir= --set run.dir=" +
         dir + " --set log.metrics=" + dir + "/m.jsonl --overwrite";  // each run starts over
}

TEST(PlanCalibrate, WritesTheFileThatThisMachineLoads) {
  const std::string dir = temp_dir("calibrate");
  const std::string file = dir + "/cal.json";
  Result r = kiri("plan --calibrate --out " + file + " --offload-path " + dir +
                  "/disk --disk-bytes 16MiB --offload-block-size 256KiB --offload-queue-depth 4"
                  " --offload-engine threads");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fp32 GEMM 1024^3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  disk of " + dir + "/disk ("), std::string::npos) << r.output;
  std::ifstream in(file);
  ASSERT_TRUE(in.good()) << r.output;
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["kind"], "kiri-calibration");
  EXPECT_GT(j["gemm"]["flops_1_thread"].get<double>(), 1e9);
  EXPECT_EQ(j["link"]["method"], "memcpy");
  EXPECT_GT(j["link"]["bandwidth"].get<double>(), 1e8);
  // The disk at the block size and queue depth asked for, the scratch file gone.
  EXPECT_EQ(j["version"], 6);
  // Version 6: the step's kernels, each timed (the one-pass loss and the vocab-parallel pair,
  // AdamW with and without zeroing, the norm and a zeroing pass apart).
  for (const char* key : {"logit_s", "logit_split_s", "optimizer_s", "optimizer_zeroing_s",
                          "gradient_s", "zeroing_s"})
    EXPECT_GT(j["non_gemm"][key].get<double>(), 0) << key;
  EXPECT_NE(r.output.find("gradient norm "), std::string::npos) << r.output;
  EXPECT_GT(j["gemm_bf16"]["flops_1_thread"].get<double>(), 1e9);
  EXPECT_FALSE(j["gemm_bf16"]["path"].get<std::string>().empty());
  EXPECT_EQ(j["disk"]["block_size"], 256 << 10);
  EXPECT_EQ(j["disk"]["queue_depth"], 4);
  EXPECT_EQ(j["disk"]["engine"], "threads");
  EXPECT_EQ(j["disk"]["bytes"], 16 << 20);
  EXPECT_GT(j["disk"]["read_bytes_per_s"].get<double>(), 1e6);
  EXPECT_GT(j["disk"]["write_bytes_per_s"].get<double>(), 1e6);
  EXPECT_TRUE(!fs::exists(dir + "/disk") || fs::is_empty(dir + "/disk"));
  // The this-machine preset takes it and says what is measured.
  r = kiri("plan --model gpt2-124M --cluster this-machine --gpus 2 --json",
           "KIRI_CALIBRATION=" + file);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json p = nlohmann::json::parse(r.output);
  EXPECT_EQ(p["cluster"]["source"], file);
  // The peak is the measured FMA peak, the efficiency the GEMM rate over it.
  const double peak = j["peak"]["fp32"]["flops_per_core"].get<double>();
  EXPECT_GT(peak, 1e9);
  EXPECT_DOUBLE_EQ(p["cluster"]["flops_fp32"].get<double>(), peak);
  EXPECT_DOUBLE_EQ(p["cluster"]["efficiency"].get<double>(),
                   std::min(1.0, j["gemm"]["flops_1_thread"].get<double>() / peak));
  // Every candidate's MFU is its model FLOPs over the world's peak of its dtype.
  ASSERT_FALSE(p["candidates"].empty()) << r.output;
  for (const nlohmann::json& e : p["candidates"]) {
    const std::string dtype = e["layout"]["dtype"];
    const double dtype_peak = p["cluster"][dtype == "fp32"   ? "flops_fp32"
                                           : dtype == "bf16" ? "flops_16bit"
                                                             : "flops_fp16"];
    const double mfu = e["mfu"];
    EXPECT_NEAR(
        mfu,
        e["model_flops_per_step"].get<double>() / (2 * dtype_peak * e["step_time_s"].get<double>()),
        1e-9 * mfu);
    EXPECT_GT(mfu, 0);
    // No candidate beats its dtype's measured GEMM rate: the fp32 efficiency, or the 16-bit
    // path's rate over the 16-bit peak. (Against the fp32 efficiency alone this failed under
    // ctest -j 2 on a CPU without bf16 dot products, where the bf16 peak is the fp32 FMA's and
    // via_f32 measured 153 GFLOP/s while the loaded fp32 GEMM measured 104.)
    const double bound =
        dtype == "fp32" ? p["cluster"]["efficiency"].get<double>()
                        : std::min(1.0, p["cluster"]["sustained_16bit"].get<double>() / dtype_peak);
    EXPECT_LE(mfu, bound * (1 + 1e-9)) << dtype;
  }
  EXPECT_DOUBLE_EQ(p["cluster"]["intra"]["bandwidth"].get<double>(),
                   j["link"]["bandwidth"].get<double>());
  EXPECT_TRUE(p["cluster"]["disk"]["measured"].get<bool>());
  EXPECT_DOUBLE_EQ(p["cluster"]["disk"]["read_bandwidth"].get<double>(),
                   j["disk"]["read_bytes_per_s"].get<double>());
  EXPECT_DOUBLE_EQ(p["cluster"]["disk"]["write_bandwidth"].get<double>(),
                   j["disk"]["write_bytes_per_s"].get<double>());
  r = kiri("plan --model gpt2-124M --cluster this-machine --gpus 2", "KIRI_CALIBRATION=" + file);
  EXPECT_NE(r.output.find("this-machine: measured (" + file + "): cores, memory, fp32 GEMM"),
            std::string::npos)
      << r.output;
  r = kiri("plan --model gpt2-124M --cluster this-machine --gpus 2", "KIRI_CALIBRATION=none");
  EXPECT_NE(r.output.find("assumed: all (no calibration file"), std::string::npos) << r.output;
  std::ofstream(dir + "/bad.json") << "{\"kind\": \"kiri-calibration\"}";
  r = kiri("plan --cluster this-machine", "KIRI_CALIBRATION=" + dir + "/bad.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is not valid"), std::string::npos) << r.output;
}

TEST(PlanCalibrate, MeasuresAllReduceOverTwoRanks) {
  const std::string file = temp_dir("calibrate2") + "/cal.json";
  Result r = kiri("launch -n 2 --threads 1 -- plan --calibrate --disk-bytes 16MiB --out " + file +
                  " --offload-path " + fs::path(file).parent_path().string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("all_reduce over 2 ranks"), std::string::npos) << r.output;
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["link"]["method"], "all_reduce");
  EXPECT_EQ(j["link"]["ranks"], 2);
  EXPECT_GT(j["link"]["latency"].get<double>(), 0);
  EXPECT_EQ(j["link"]["samples"].size(), 5u);
}

// 50MB = 47.68 MiB per rank: plain DDP over 2 ranks runs out of memory in the optimizer
// states; the planner's advice names them and a layout that fits, which then trains.
TEST(PlanOutOfMemory, TheMessageNamesTheCategoryAndTheCut) {
  const std::string dir = temp_dir("oom");
  Result r = kiri("launch -n 2 --threads 1 -- train " + small_run(dir) +
                      " --set parallel.dp=2 --mem-limit 50MB",
                  "KIRI_CALIBRATION=none");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("out of memory: allocating"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("planner: optimizer_states overflowed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("optimizer_states overflowed: dp "), std::string::npos) << r.output;
  // The advice is a layout of the same 2 ranks that fits: its --set flags train under the
  // same limit.
  const size_t begin = r.output.find("--set parallel.dp=", r.output.find("would need"));
  const size_t end = r.output.find(", or let kiri train --auto choose", begin);
  ASSERT_NE(end, std::string::npos) << r.output;
  const std::string advice = r.output.substr(begin, end - begin);
  Result again = kiri(
      "launch -n 2 --threads 1 -- train " + small_run(dir) + " " + advice + " --mem-limit 50MB",
      "KIRI_CALIBRATION=none");
  EXPECT_EQ(again.code, 0) << advice << ": " << again.output;
  EXPECT_NE(again.output.find("step      3/3"), std::string::npos) << again.output;
  // One process: no layout of one rank fits; the advice says how many ranks would.
  r = kiri("train " + small_run(dir) + " --mem-limit 30MB", "KIRI_CALIBRATION=none");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("overflowed: no layout of 1 rank(s) fits"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("would fit on"), std::string::npos) << r.output;
}

// One process at 45MB (36.5 MiB of the model's 85%): the fp32 states (49.5 MiB) fit no layout
// of one rank, but parameters and gradients (24.8 MiB) and a small staging pool (2 x 1 MiB at
// 64 KiB blocks) with the optimizer states on NVMe do: the advice names offload, its NVMe
// bytes and its slowdown, and --auto chooses it.
std::string offload_run(const std::string& dir) {
  return small_run(dir) +
         " --set offload.buffer_count=2 --set offload.buffer_mb=1 --set offload.block_size=64KiB"
         " --mem-limit 45MB";
}

TEST(PlanOutOfMemory, NamesOffloadWhenOnlyItFits) {
  const std::string dir = temp_dir("oom_offload");
  const Result r = kiri("train " + offload_run(dir), "KIRI_CALIBRATION=none");
  EXPECT_EQ(r.code, 1) << r.output;
  for (const char* w : {"planner: optimizer_states overflowed",
                        "overflowed: the optimizer states offloaded to NVMe would need",
                        "per rank on NVMe under offload.path", "predicted slowdown",
                        "--set offload.optimizer=nvme --set offload.parameters=none"})
    EXPECT_NE(r.output.find(w), std::string::npos) << w << ": " << r.output;
}

TEST(PlanAuto, ChoosesOffloadWhenOnlyItFits) {
  const std::string dir = temp_dir("auto_offload");
  const Result r = kiri("train " + offload_run(dir) + " --auto --dry-run", "KIRI_CALIBRATION=none");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("auto layout: why: bottleneck model_states -> cut offload"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(", offload optimizer on 1 rank(s)"), std::string::npos) << r.output;
  // The resolved config sets the key (the JSON the dry run prints).
  const size_t begin = r.output.find('{'), end = r.output.rfind('}');
  ASSERT_NE(begin, std::string::npos) << r.output;
  const nlohmann::json cfg = nlohmann::json::parse(r.output.substr(begin, end - begin + 1));
  EXPECT_EQ(cfg["offload"]["optimizer"], "nvme") << r.output;
  EXPECT_EQ(cfg["offload"]["parameters"], "none") << r.output;
}

// The same limit with --auto: the planner picks a layout that fits and the run trains.
TEST(PlanAuto, PicksALayoutThatFitsAndTrains) {
  const std::string dir = temp_dir("auto");
  Result r = kiri("launch -n 2 --threads 1 -- train " + small_run(dir) + " --auto --mem-limit 50MB",
                  "KIRI_CALIBRATION=none");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("auto layout: "), std::string::npos) << r.output;
  // The states are the bottleneck; no ZeRO layout fits 85% here, tp 2 cuts them.
  EXPECT_NE(r.output.find("auto layout: why: bottleneck model_states -> cut "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("zero 0, fp32, recompute none, b 2, m 1 on 2 rank(s)"), std::string::npos)
      << "plain DDP does not fit: " << r.output;
  EXPECT_NE(r.output.find("step      3/3"), std::string::npos) << r.output;
  std::ifstream metrics(dir + "/m.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 3);
  // No layout of one rank fits 20MB: a named error before any work.
  r = kiri("train " + small_run(dir) + " --auto --mem-limit 20MB", "KIRI_CALIBRATION=none");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("kiri train --auto: no layout of 1 rank(s) fits"), std::string::npos)
      << r.output;
}

}  // namespace
