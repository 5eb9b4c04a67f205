// The this-machine preset's peak (docs/metrics.md, docs/planner.md): a version 3 calibration
// file's FMA peaks are the peaks, the measured GEMM rate over the fp32 peak the efficiency,
// and the planner's MFU is model FLOPs over that peak; version 1-2 files keep loading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/plan/calibration.h"
#include "kiri/plan/time.h"

namespace kiri::plan {
namespace {

namespace fs = std::filesystem;

Calibration measured() {
  Calibration c;
  c.host = "box";
  c.cores = 2;
  c.memory_bytes = 8e9;
  c.gemm_n = 1024;
  c.threads = 2;
  c.gemm_flops_1_thread = 120e9;
  c.gemm_flops_all_threads = 230e9;
  c.link_method = "memcpy";
  c.samples = {{1 << 20, 1e-4}, {64 << 20, 6e-3}};
  c.bandwidth = 10e9;
  c.peak_fp32 = {160e9, "avx512 vfmadd231ps"};
  c.peak_bf16 = {170e9, "avx512 vfmadd231ps"};
  c.peak_fp16 = {320e9, "avx512_fp16 vfmadd231ph"};
  return c;
}

std::string temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("kiri_peak_cal_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

TEST(PlanPeak, VersionThreeStoresThePeaksAndThePresetTakesThem) {
  const std::string path = temp_file("v3.json");
  save_calibration(measured(), path);
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in);
  // Version 4 adds the disk (not measured here), 5 the bf16 GEMM, 6 the non-GEMM split.
  EXPECT_EQ(j["version"], 6);
  EXPECT_FALSE(j.contains("disk"));
  EXPECT_DOUBLE_EQ(j["peak"]["fp32"]["flops_per_core"].get<double>(), 160e9);
  const Calibration back = *load_calibration(path);
  EXPECT_DOUBLE_EQ(back.peak_bf16.flops, 170e9);
  EXPECT_EQ(back.peak_fp16.instruction, "avx512_fp16 vfmadd231ph");
  const ClusterSpec c = calibrated_cluster(back, path);
  EXPECT_DOUBLE_EQ(c.flops_fp32, 160e9);
  EXPECT_DOUBLE_EQ(c.flops_16bit, 170e9);
  EXPECT_DOUBLE_EQ(peak_flops(c, Precision::kFp16), 320e9);
  EXPECT_DOUBLE_EQ(c.efficiency, 120e9 / 160e9);
  // The GEMM rates the time model runs at are what was measured (16-bit, not measured
  // here: half of it, and the sources say so).
  EXPECT_DOUBLE_EQ(sustained_flops(c, Precision::kFp32), 120e9);
  EXPECT_DOUBLE_EQ(sustained_flops(c, Precision::kBf16), 60e9);
  EXPECT_NE(describe_sources(c).find("FMA peak (1 thread: fp32 160"), std::string::npos)
      << describe_sources(c);
  EXPECT_NE(describe_sources(c).find("16-bit GEMMs at fp32 GEMM / 2"), std::string::npos);
  fs::remove_all(fs::path(path).parent_path());
}

// Version 5: the measured bf16 GEMM rate is what 16-bit GEMMs run at (fp16 too), in place of
// fp32 / 2: without AMX kiri widens bf16 to fp32 (about the fp32 rate), with AMX oneDNN's
// bf16 matmul is faster than fp32.
TEST(PlanPeak, VersionFiveTakesTheMeasuredBf16Gemm) {
  Calibration m = measured();
  m.gemm_bf16_flops_1_thread = 105e9;
  m.gemm_bf16_path = "via_f32";
  const std::string path = temp_file("v5.json");
  save_calibration(m, path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_DOUBLE_EQ(j["gemm_bf16"]["flops_1_thread"].get<double>(), 105e9);
  EXPECT_EQ(j["gemm_bf16"]["path"], "via_f32");
  const Calibration back = *load_calibration(path);
  EXPECT_DOUBLE_EQ(back.gemm_bf16_flops_1_thread, 105e9);
  const ClusterSpec c = calibrated_cluster(back, path);
  EXPECT_DOUBLE_EQ(sustained_flops(c, Precision::kFp32), 120e9);
  EXPECT_DOUBLE_EQ(sustained_flops(c, Precision::kBf16), 105e9);
  EXPECT_DOUBLE_EQ(sustained_flops(c, Precision::kFp16), 105e9);
  EXPECT_NE(describe_sources(c).find("bf16 GEMM (1 thread, via_f32"), std::string::npos)
      << describe_sources(c);
  EXPECT_EQ(describe_sources(c).find("fp32 GEMM / 2"), std::string::npos) << describe_sources(c);
  // A bf16 rate of 0 is "not measured"; a negative one is a named error.
  j["gemm_bf16"]["flops_1_thread"] = -1.0;
  std::ofstream(path) << j.dump();
  try {
    load_calibration(path);
    FAIL() << "a negative bf16 GEMM rate loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemm_bf16.flops_1_thread"), std::string::npos)
        << e.what();
  }
  fs::remove_all(fs::path(path).parent_path());
}

// MFU = model FLOPs / (world · peak · step): against the FMA peak, never the GEMM rate, and
// so at most the efficiency (< 1).
TEST(PlanPeak, MfuIsAgainstTheFmaPeak) {
  const ClusterSpec c = calibrated_cluster(measured(), "");
  const ModelSpec model = model_from_dims(4, 256, 4, 8192, 1024);
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    Layout l;
    l.dtype = p;
    l.dp = 2;
    l.micro_batch = 4;
    l.global_batch = 8;
    l.seq_len = 128;
    const TimeBreakdown t = estimate_time(model, l, c);
    const double peak = p == Precision::kFp32 ? 160e9 : p == Precision::kBf16 ? 170e9 : 320e9;
    EXPECT_NEAR(t.mfu, t.model_flops_per_step / (2 * peak * t.step_s), 1e-12 * t.mfu);
    EXPECT_GT(t.mfu, 0);
    EXPECT_LE(t.mfu, sustained_flops(c, p) / peak);
  }
}

// A file from before the peak (version 2): the GEMM rate is the peak, efficiency 1, as before.
TEST(PlanPeak, OlderFilesKeepLoading) {
  Calibration c = measured();
  c.peak_fp32 = c.peak_bf16 = c.peak_fp16 = {};
  const std::string path = temp_file("v2.json");
  save_calibration(c, path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  j.erase("peak");
  j["version"] = 2;
  std::ofstream(path) << j.dump();
  const ClusterSpec s = calibrated_cluster(*load_calibration(path), path);
  EXPECT_DOUBLE_EQ(s.flops_fp32, 120e9);
  EXPECT_DOUBLE_EQ(s.flops_16bit, 60e9);
  EXPECT_DOUBLE_EQ(s.efficiency, 1.0);
  EXPECT_NE(describe_sources(s).find("peak = the measured GEMM rate"), std::string::npos);
  j["peak"] = {{"fp32", {{"flops_per_core", -1.0}}},
               {"bf16", {{"flops_per_core", 1.0}}},
               {"fp16", {{"flops_per_core", 1.0}}}};
  std::ofstream(path) << j.dump();
  EXPECT_THROW(load_calibration(path), Error);
  fs::remove_all(fs::path(path).parent_path());
}

}  // namespace
}  // namespace kiri::plan
