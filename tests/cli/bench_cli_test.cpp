// kiri bench --activations end to end (benchmarks/activations.sh's numbers): seven tp layouts
// over 2 ranks, one JSON line each, whose activation peaks order as their recomputation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace {

using kiri::testing::Result;
using kiri::testing::run_kiri;

TEST(CliBench, ActivationsNeedsTensorParallelRanks) {
  const Result r = run_kiri("bench --activations --config tiny --steps 1 --rounds 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("tensor parallelism needs 2 or more ranks"), std::string::npos)
      << r.output;
}

// Seven short runs of tiny on 2 ranks: about 10 s here, labelled slow (not under ASan).
TEST(CliBenchSlow, ActivationsOrdersThePeaksByWhatIsKept) {
  const Result r = run_kiri(
      "launch -n 2 --threads 1 -- bench --activations --config tiny --steps 1 --warmup 0 "
      "--rounds 1");
  ASSERT_EQ(r.code, 0) << r.output;
  std::map<std::string, nlohmann::json> rows;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') {
      nlohmann::json j = nlohmann::json::parse(line);
      rows[j["layout"].get<std::string>()] = j;
    }
  ASSERT_EQ(rows.size(), 7u) << r.output;
  auto act = [&](const std::string& l) {
    return rows.at(l)["activations_peak_bytes"].get<double>();
  };
  // Each layout keeps a subset of the one before it: its peak is lower.
  EXPECT_LT(act("tp2-sp"), act("tp2"));
  EXPECT_LT(act("tp2-selective"), act("tp2"));  // core_attn frees the log-sum-exp
  EXPECT_LT(act("tp2-selective-all"), act("tp2-selective"));
  EXPECT_LT(act("tp2-sp-selective-all"), act("tp2-selective-all"));
  EXPECT_LT(act("tp2-full"), act("tp2-selective-all"));
  EXPECT_LT(act("tp2-sp-full"), act("tp2-full"));
  EXPECT_EQ(rows.at("tp2")["vs_tp2"].get<double>(), 1.0);
  EXPECT_EQ(rows.at("tp2-sp-selective-all")["recompute_modules"].size(), 3u);
  EXPECT_TRUE(rows.at("tp2-sp-full")["sequence_parallel"].get<bool>());
}

// kiri bench --dtypes: each 16-bit row names its GEMM path and the rates it was chosen by
// (one pass over the bench's own shapes; the chosen rate is the better of the two). The
// rates come from the machine's cache after the first run (about 8 s to measure here).
TEST(CliBench, DtypesRowsNameTheGemmPathAndItsRates) {
  const Result r =
      run_kiri("bench --dtypes --config tiny --threads 1 --steps 1 --warmup 0 --rounds 1");
  ASSERT_EQ(r.code, 0) << r.output;
  int lowp = 0;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    // Every row: MFU against its own dtype's peak, named, and the step over its GEMMs.
    const double mfu = j["mfu"].get<double>(), sog = j["step_over_gemms"].get<double>();
    EXPECT_TRUE(std::isfinite(mfu) && mfu > 0 && mfu <= 1) << line;
    EXPECT_FALSE(j["peak_instruction"].get<std::string>().empty()) << line;
    EXPECT_TRUE(std::isfinite(sog) && sog > 0.5) << line;
    if (j["dtype"] == "F32") {
      EXPECT_FALSE(j.contains("gemm_lowp")) << line;
      continue;
    }
    ++lowp;
    EXPECT_FALSE(j.value("gemm_lowp", "").empty()) << line;
    const nlohmann::json& g = j["gemm_lowp_gflops"];
    EXPECT_GT(g["via_f32"].get<double>(), 0) << line;
    EXPECT_GT(g["onednn"].get<double>(), 0) << line;
    EXPECT_GE(g["chosen"].get<double>(),
              0.999 * std::max(g["via_f32"].get<double>(), g["onednn"].get<double>()) - 1e-9)
        << line;
  }
  EXPECT_EQ(lowp, 2) << r.output;  // bf16 and fp16
}

// kiri bench --dtype bf16: the step in bf16, MFU against the bf16 peak (named), the step over
// its bf16 GEMMs, and the GEMM path with the rates it was chosen by.
TEST(CliBench, Bf16BenchNamesItsPeakAndItsGemmPath) {
  const Result r = run_kiri("bench --dtype bf16 --config tiny --threads 1 --steps 1 --warmup 0");
  ASSERT_EQ(r.code, 0) << r.output;
  int rows = 0;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    ++rows;
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["dtype"], "BF16") << line;
    const double mfu = j["mfu"].get<double>(), sog = j["step_over_gemms"].get<double>();
    EXPECT_TRUE(std::isfinite(mfu) && mfu > 0 && mfu <= 1) << line;
    EXPECT_TRUE(std::isfinite(sog) && sog > 0.5) << line;
    EXPECT_GT(j["gemm_step_s"].get<double>(), 0) << line;
    EXPECT_FALSE(j["peak_instruction"].get<std::string>().empty()) << line;
    EXPECT_FALSE(j.value("gemm_lowp", "").empty()) << line;
    EXPECT_GT(j["gemm_lowp_gflops"]["chosen"].get<double>(), 0) << line;
  }
  EXPECT_EQ(rows, 1) << r.output;
}

TEST(CliBench, DtypeNamesAWrongValue) {
  const Result r = run_kiri("bench --dtype int8 --config tiny --threads 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("--dtype must be fp32, bf16 or fp16, got 'int8'"), std::string::npos)
      << r.output;
}

}  // namespace
