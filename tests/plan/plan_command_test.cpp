// `kiri plan`: the JSON parses and has the documented keys (docs/planner.md); bad input
// exits 2 with the rule named.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct Result {
  int code = -1;
  std::string out;
};

Result run(const std::string& args) {
  const std::string cmd = std::string(KIRI_BINARY) + " plan " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void expect_evaluation(const nlohmann::json& e) {
  for (const char* k :
       {"layout", "stage", "memory", "memory_capacity", "stages", "fits", "flops_per_step",
        "model_flops_per_step", "step_time_s", "tokens_per_s", "tflops_per_device", "mfu", "time"})
    EXPECT_TRUE(e.contains(k)) << k;
  for (const char* k :
       {"parameters", "gradients", "optimizer_states", "activations", "buffers", "total"})
    EXPECT_TRUE(e["memory"].contains(k)) << k;
  for (const char* k : {"dp", "tp", "pp", "zero_stage", "dtype", "recompute", "schedule",
                        "virtual_stages", "micro_batch", "global_batch", "microbatches", "seq_len",
                        "sequence_parallel", "activations"})
    EXPECT_TRUE(e["layout"].contains(k)) << k;
  const auto& m = e["memory"];
  EXPECT_DOUBLE_EQ(m["total"].get<double>(),
                   m["parameters"].get<double>() + m["gradients"].get<double>() +
                       m["optimizer_states"].get<double>() + m["activations"].get<double>() +
                       m["buffers"].get<double>());
}

TEST(PlanCommand, LayoutJson) {
  const Result r =
      run("--model gpt2-350M --dp 2 --tp 2 --pp 2 --zero-stage 1 --micro-batch 2 "
          "--global-batch 32 --recompute full --schedule interleaved --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  expect_evaluation(j);
  EXPECT_EQ(j["world"], 8);
  EXPECT_EQ(j["layout"]["schedule"], "interleaved");
  EXPECT_EQ(j["layout"]["virtual_stages"], 2);
  EXPECT_EQ(j["layout"]["microbatches"], 8);
  EXPECT_EQ(j["stages"].size(), 2u);
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_TRUE(j["model"].contains("params"));
  EXPECT_TRUE(j["cluster"].contains("memory_bytes"));
}

TEST(PlanCommand, PlanJson) {
  const Result r = run("--model gpt2-124M --cluster a100-80g-nvlink --gpus 8 --json --top 5");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* k : {"model", "cluster", "world", "count", "candidates", "recommendation"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["candidates"].size(), 5u);
  for (const auto& c : j["candidates"]) expect_evaluation(c);
  const auto& rec = j["recommendation"];
  EXPECT_EQ(rec["bottleneck"], "compute");
  EXPECT_EQ(rec["cut"], "data_parallel");
  for (const char* k : {"message", "reasons", "min_devices", "layout"})
    EXPECT_TRUE(rec.contains(k)) << k;
  expect_evaluation(rec["layout"]);
}

TEST(PlanCommand, ParamsOnlyHasNullTimes) {
  const Result r = run("--params 7.5e9 --gpus 64 --dp 64 --zero-stage 3 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["step_time_s"].is_null());
  EXPECT_NEAR(j["memory"]["total"].get<double>() / 1e9, 1.9, 0.05);
}

TEST(PlanCommand, TableAndRecommendation) {
  const Result r = run("--model llama-7B --gpus 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bottleneck: model_states -> cut: zero"), std::string::npos) << r.out;
}

TEST(PlanCommand, BadInputIsAConfigError) {
  for (const char* args :
       {"--model gpt2-124M --tp 5", "--model nope", "--cluster tpu", "--dp 2 --global-batch 3",
        "--dtype fp8 --dp 1", "--gpus 0", "--model gpt2-124M --params 1e9",
        "--layers 4 --hidden 64", "--dp 2 --gpus 4", "--recompute full", "--frobnicate 1"}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
  }
  const Result r = run("--model gpt2-124M --tp 5");
  EXPECT_NE(r.out.find("does not divide the 12 heads"), std::string::npos) << r.out;
}

}  // namespace
