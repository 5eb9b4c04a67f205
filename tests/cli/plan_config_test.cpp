// kiri plan speaks kiri train's vocabulary (docs/planner.md, "A training config"): a config
// file and --set KEY=VALUE, with the short layout flags as aliases of their keys.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

using kiri::testing::run_kiri;
using nlohmann::json;

std::string plan_json(const std::string& args) {
  const kiri::testing::Result r = run_kiri("plan " + args + " --json");
  EXPECT_EQ(r.code, 0) << r.output;
  return r.output;
}

// The same layout spelled three ways gives the same JSON, byte for byte.
TEST(PlanConfig, TheShortFlagsAreAliasesOfTheConfigKeys) {
  const std::string flags = plan_json(
      "--model llama-7B --dp 2 --tp 2 --pp 2 --zero-stage 1 --dtype fp32 --micro-batch 2 "
      "--seq-len 512 --activation-checkpointing selective --recompute-modules core_attn,mlp_act "
      "--sequence-parallel --schedule interleaved --offload-optimizer nvme --offload-buffer-mb 32 "
      "--wrap-blocks 2");
  const std::string keys = plan_json(
      "--model llama-7B --set parallel.dp=2 --set parallel.tp=2 --set parallel.pp=2 "
      "--set parallel.zero_stage=1 --set train.dtype=fp32 --set train.micro_batch=2 "
      "--set train.seq_len=512 --set parallel.activation_checkpointing=selective "
      "--set parallel.recompute_modules=core_attn,mlp_act --set parallel.sequence_parallel=true "
      "--set parallel.schedule=interleaved --set offload.optimizer=nvme "
      "--set offload.buffer_mb=32 --set parallel.wrap_blocks=2");
  const std::string mixed = plan_json(
      "--model llama-7B --dp 2 --set parallel.tp=2 --pp 2 --zero-stage 1 --dtype fp32 "
      "--micro-batch 2 --set train.seq_len=512 --activation-checkpointing selective "
      "--recompute-modules core_attn,mlp_act --sequence-parallel --schedule interleaved "
      "--set offload.optimizer=nvme --offload-buffer-mb 32 --wrap-blocks 2");
  EXPECT_EQ(flags, keys);
  EXPECT_EQ(flags, mixed);
  const json j = json::parse(flags);
  EXPECT_EQ(j["layout"]["virtual_stages"], 2);  // interleaved's default, as with the flag
  EXPECT_EQ(j["layout"]["global_batch"], 512);  // kiri plan's default: 512 sequences
  EXPECT_EQ(j["world"], 8);
}

// A training config gives the model and the layout; dp 0 is inferred from --gpus.
TEST(PlanConfig, ATrainingConfigIsPlannedAsItWouldRun) {
  const json j = json::parse(plan_json(std::string(KIRI_SOURCE_DIR) +
                                       "/configs/tiny-byte.json --set parallel.tp=2 --gpus 4"));
  EXPECT_EQ(j["model"]["layers"], 2);
  EXPECT_EQ(j["model"]["hidden"], 64);
  EXPECT_EQ(j["model"]["vocab"], 257);  // model.vocab_size 0: the byte tokenizer's
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["layout"]["tp"], 2);
  // The config's batch: micro_batch 16 x grad_accum 1 x dp 2.
  EXPECT_EQ(j["layout"]["global_batch"], 32);
  EXPECT_EQ(j["layout"]["dtype"], "fp32");
}

TEST(PlanConfig, ContradictionsAndBadKeysAreNamed) {
  const auto error = [](const std::string& args) {
    const kiri::testing::Result r = run_kiri("plan " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.output;
    return r.output;
  };
  EXPECT_NE(error("--tp 2 --set parallel.tp=4")
                .find("--tp and --set parallel.tp=4 both give parallel.tp: give one"),
            std::string::npos);
  EXPECT_NE(error(std::string(KIRI_SOURCE_DIR) + "/configs/tiny-byte.json --model gpt2-124M")
                .find("give one model: the config's model.* keys"),
            std::string::npos);
  EXPECT_NE(error("--set parallel.tpp=2").find("parallel.tpp"), std::string::npos);
  EXPECT_NE(error("--set parallel.dp=0 --set parallel.tp=3 --gpus 8")
                .find("world 8 is not a multiple of tp 3 x pp 1 = 3"),
            std::string::npos);
  EXPECT_NE(error("--set parallel.dp=2 --gpus 4").find("--gpus 4 is not parallel.dp x tp x pp = 2"),
            std::string::npos);
}

}  // namespace
