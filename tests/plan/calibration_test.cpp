// The calibration file and the this-machine preset built from it (plan/calibration.h).
#include "kiri/plan/calibration.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/plan/time.h"
#include "temp_dir.h"

namespace kiri::plan {
namespace {

TEST(PlanCalibration, FitsAlphaBetaOfARingAllReduce) {
  // t = 2(n−1)α + 2(n−1)/n·bytes/β with n = 4, α = 5 µs, β = 10 GB/s.
  const int n = 4;
  const double alpha = 5e-6, beta = 10e9;
  std::vector<LinkSample> s;
  for (double bytes : {4e3, 64e3, 1e6, 16e6})
    s.push_back({bytes, 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes / beta});
  const Link l = fit_link(s, n);
  EXPECT_NEAR(l.latency, alpha, alpha * 1e-6);
  EXPECT_NEAR(l.bandwidth, beta, beta * 1e-6);
  // Copies: t = α + bytes/β.
  const Link c = fit_link({{1e6, 1e-6 + 1e6 / 20e9}, {64e6, 1e-6 + 64e6 / 20e9}}, 1);
  EXPECT_NEAR(c.bandwidth, 20e9, 20e9 * 1e-6);
  EXPECT_NEAR(c.latency, 1e-6, 1e-12);
  EXPECT_THROW(fit_link({{1e6, 1e-3}}, 2), Error);
}

TEST(PlanCalibration, RoundTripsAndBuildsThisMachine) {
  Calibration c;
  c.host = "box";
  c.date = "2024-01-01T00:00:00Z";
  c.cores = 4;
  c.memory_bytes = 16e9;
  c.gemm_n = 1024;
  c.threads = 4;
  c.gemm_flops_1_thread = 100e9;
  c.gemm_flops_all_threads = 380e9;
  c.link_method = "all_reduce";
  c.link_ranks = 2;
  c.samples = {{4096, 2e-5}, {1 << 20, 3e-4}};
  c.bandwidth = 5e9;
  c.latency = 1e-5;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiri_cal_" + std::to_string(::getpid())) / "c.json")
                               .string();
  save_calibration(c, path);
  const std::optional<Calibration> back = load_calibration(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->host, "box");
  EXPECT_DOUBLE_EQ(back->gemm_flops_1_thread, 100e9);
  EXPECT_EQ(back->samples.size(), 2u);
  const ClusterSpec m = calibrated_cluster(*back, path);
  EXPECT_EQ(m.devices_per_node, 4);
  EXPECT_DOUBLE_EQ(m.memory_bytes, 4e9);
  EXPECT_DOUBLE_EQ(m.flops_fp32, 100e9);
  EXPECT_DOUBLE_EQ(m.flops_16bit, 50e9);
  EXPECT_DOUBLE_EQ(m.efficiency, 1.0);
  EXPECT_DOUBLE_EQ(m.intra.bandwidth, 5e9);
  EXPECT_DOUBLE_EQ(m.intra.latency, 1e-5);
  EXPECT_NE(describe_sources(m).find("measured (" + path + ")"), std::string::npos);
  // Version 1 (no non-GEMM costs): the assumed ones, and said so.
  EXPECT_DOUBLE_EQ(m.non_gemm.logit_s, this_machine_assumed().non_gemm.logit_s);
  EXPECT_NE(describe_sources(m).find("non-GEMM work at 10 GB/s"), std::string::npos);
  // Version 2 (6: the loss's and the zeroing's split): measured, round-tripped.
  c.logit_s = 1e-9;
  c.optimizer_s = 3e-9;
  c.gradient_s = 0.5e-9;
  c.activation_s = 2e-9;
  c.logit_split_s = 1.5e-9;
  c.optimizer_zeroing_s = 3.25e-9;
  c.zeroing_s = 0.25e-9;
  c.step_model = calibration_step_model();
  c.step_s = 0.25;
  save_calibration(c, path);
  const Calibration v2 = *load_calibration(path);
  EXPECT_DOUBLE_EQ(v2.activation_s, 2e-9);
  EXPECT_EQ(v2.step_model.vocab, c.step_model.vocab);
  EXPECT_DOUBLE_EQ(v2.step_s, 0.25);
  const ClusterSpec m2 = calibrated_cluster(v2, path);
  EXPECT_DOUBLE_EQ(m2.non_gemm.logit_s, 1e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.activation_s, 2e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.optimizer_s, 3e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.gradient_s, 0.5e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.logit_split_s, 1.5e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.optimizer_zeroing_s, 3.25e-9);
  EXPECT_DOUBLE_EQ(m2.non_gemm.zeroing_s, 0.25e-9);
  EXPECT_FALSE(v2.non_gemm_derived);
  EXPECT_NE(describe_sources(m2).find("non-GEMM work (logits"), std::string::npos);
  EXPECT_EQ(describe_sources(m2).find("version 2-5"), std::string::npos);
  // One host: no transfer share measured, none applied.
  EXPECT_EQ(v2.link_hosts, 1);
  EXPECT_EQ(m2.transfer_compute_share, 0);
  // Across hosts: the share a transfer in flight took, round-tripped and applied, and said so.
  c.link_hosts = 2;
  c.transfer_compute_share = 0.3;
  save_calibration(c, path);
  const Calibration across = *load_calibration(path);
  EXPECT_EQ(across.link_hosts, 2);
  EXPECT_DOUBLE_EQ(across.transfer_compute_share, 0.3);
  const ClusterSpec m3 = calibrated_cluster(across, path);
  EXPECT_DOUBLE_EQ(m3.transfer_compute_share, 0.3);
  EXPECT_NE(describe_sources(m3).find("a transfer in flight takes 0.3 of a rank's compute"),
            std::string::npos)
      << describe_sources(m3);
  // A share outside [0, 1] is a named error.
  c.transfer_compute_share = 1.5;
  save_calibration(c, path);
  try {
    load_calibration(path);
    ADD_FAILURE() << "a share of 1.5 loaded";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("link.transfer_compute_share 1.5"), std::string::npos)
        << e.message();
  }
  EXPECT_FALSE(load_calibration(path + ".missing").has_value());
  EXPECT_FALSE(load_calibration("none").has_value());
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// A 2-core calibration with round costs (AdamW's per element given), for the tests below.
Calibration small_calibration(double optimizer_s) {
  Calibration c;
  c.cores = 2;
  c.memory_bytes = 8e9;
  c.gemm_flops_1_thread = 150e9;
  c.bandwidth = 5e9;
  c.latency = 5e-6;
  c.logit_s = 1.2e-9;
  c.optimizer_s = optimizer_s;
  c.gradient_s = 0.4e-9;
  c.activation_s = 7e-9;
  return c;
}

// A version 2-5 file timed the two-kernel loss and zeroing + norm together: it still loads, its
// costs split by the bytes each part moves (16 → 8 for the one-pass loss, 8 = 4 + 4 for the
// gradient, 28 → 32 for AdamW zeroing), the activations refitted to its step, and says so.
TEST(PlanCalibration, AVersionFiveFileSplitsItsCostsByBytes) {
  Calibration c = small_calibration(2.8e-9);
  c.step_model = calibration_step_model();
  c.step_s = 0.2;
  const std::string path = testing::temp_dir("v5") + "/v5.json";
  nlohmann::json j = nlohmann::json::parse(calibration_json(c));
  j["version"] = 5;
  for (const char* key : {"logit_split_s", "optimizer_zeroing_s", "zeroing_s"})
    j["non_gemm"].erase(key);
  std::ofstream(path) << j.dump();
  const Calibration old = *load_calibration(path);
  EXPECT_TRUE(old.non_gemm_derived);
  EXPECT_DOUBLE_EQ(old.logit_split_s, 1.2e-9);
  EXPECT_DOUBLE_EQ(old.logit_s, 0.6e-9);
  EXPECT_DOUBLE_EQ(old.optimizer_s, 2.8e-9);
  EXPECT_DOUBLE_EQ(old.optimizer_zeroing_s, 3.2e-9);
  EXPECT_DOUBLE_EQ(old.gradient_s, 0.2e-9);
  EXPECT_DOUBLE_EQ(old.zeroing_s, 0.2e-9);
  // Refitted: the calibration model's predicted step is the file's step again.
  EXPECT_NE(old.activation_s, 7e-9);
  const Calibration::StepModel sm = old.step_model;
  Layout l;
  l.dtype = Precision::kFp32;
  l.micro_batch = l.global_batch = sm.batch;
  l.seq_len = sm.seq;
  const ModelSpec model = model_from_dims(sm.n_layer, sm.n_embd, sm.n_head, sm.vocab, 1024);
  EXPECT_NEAR(estimate_time(model, l, calibrated_cluster(old, path)).step_s, 0.2, 0.2 * 1e-9);
  EXPECT_NE(describe_sources(calibrated_cluster(old, path)).find("a version 2-5 file"),
            std::string::npos);
}

// The activation cost is what the step leaves once the rest of the model is taken out: a step
// made by the model with a known cost gives that cost back, and a step faster than the rest
// gives 0.
TEST(PlanCalibration, ActivationCostIsTheStepsRemainder) {
  Calibration c = small_calibration(2.5e-9);
  const Calibration::StepModel sm = calibration_step_model();
  Layout l;
  l.dtype = Precision::kFp32;
  l.micro_batch = l.global_batch = sm.batch;
  l.seq_len = sm.seq;
  const ModelSpec model = model_from_dims(sm.n_layer, sm.n_embd, sm.n_head, sm.vocab, 1024);
  const double step = estimate_time(model, l, calibrated_cluster(c, "")).step_s;
  EXPECT_NEAR(activation_seconds_from_step(c, sm, step), 7e-9, 7e-9 * 1e-9);
  EXPECT_EQ(activation_seconds_from_step(c, sm, step / 10), 0.0);
  EXPECT_THROW(activation_seconds_from_step(c, sm, 0), Error);
}

// On a CPU without bf16 dot products the bf16 "peak" and the via_f32 GEMM both run vfmadd231ps,
// timed apart: under load the GEMM can measure above the peak (CI: PlanCalibrate's MFU bound).
// The 16-bit rate stays at its peak, and no layout's MFU passes 1.
TEST(PlanCalibration, A16BitGemmAboveItsPeakIsHeldAtThePeak) {
  Calibration c = small_calibration(2.5e-9);
  c.peak_fp32.flops = 200e9;
  c.peak_bf16.flops = 150e9;
  c.gemm_bf16_flops_1_thread = 160e9;
  const ClusterSpec m = calibrated_cluster(c, "");
  EXPECT_DOUBLE_EQ(sustained_flops(m, Precision::kBf16), 150e9);
  EXPECT_DOUBLE_EQ(sustained_flops(m, Precision::kFp16), 150e9);
  EXPECT_DOUBLE_EQ(sustained_flops(m, Precision::kFp32), 150e9);  // 200 x 0.75
  c.gemm_bf16_flops_1_thread = 120e9;
  EXPECT_DOUBLE_EQ(sustained_flops(calibrated_cluster(c, ""), Precision::kBf16), 120e9);
  Layout l;
  l.dtype = Precision::kBf16;
  l.micro_batch = l.global_batch = 8;
  l.seq_len = 64;
  const ModelSpec model = model_from_dims(2, 256, 4, 8192, 1024);
  c.gemm_bf16_flops_1_thread = 1000e9;
  EXPECT_LE(estimate_time(model, l, calibrated_cluster(c, "")).mfu, 1.0);
}

}  // namespace
}  // namespace kiri::plan
