// The kiri binary end to end: bad input gives a named error and a non-zero
// exit; a short run trains, checkpoints, evaluates and samples.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/run_kiri.h"
#include "kiri/cli/commands.h"
#include "kiri/config/config_schema.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;
using kiri::testing::run_kiri;

Result kiri(const std::string& args, const std::string& env = "") {
  return run_kiri(args, env);
}

using kiri::testing::temp_dir;

void expect_error(const std::string& args, int code, const std::string& needle) {
  Result r = kiri(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
}

TEST(Cli, BadConfigValuesAreNamed) {
  expect_error("config --set model.nlayer=2", 2, "unknown key 'model.nlayer'");
  expect_error("config --set train.lr=abc", 2, "train.lr must be a number, got \"abc\"");
  expect_error("config --set model.n_layer=0", 2, "model.n_layer must be in [1, 4096], got 0");
  expect_error("config --set model.n_head=3", 2, "model.n_head = 3 must divide model.n_embd = 256");
  expect_error(
      "config --set data.tokenizer=word", 2,
      "data.tokenizer must be gpt2 | byte | the path of a Hugging Face tokenizer, got 'word'");
  expect_error("config --set train.seq_len=512", 2,
               "train.seq_len = 512 exceeds model.block_size = 256");
  expect_error("config --set train.mem_limit=lots", 2, "cannot read a byte size from 'lots'");
  expect_error("config --set novalue", 2, "--set takes key=value");
  expect_error("train --frobnicate", 2, "unknown option --frobnicate");
  expect_error("frobnicate", 2, "unknown command 'frobnicate'");
}

TEST(Cli, BadModelParallelLayoutsAreNamedBeforeAnyWork) {
  expect_error("config --set parallel.tp=3", 2,
               "parallel.tp = 3 must divide model.n_head = 4 (tensor parallelism splits attention "
               "by heads)");
  expect_error("config --set parallel.pp=8 --set model.n_layer=4", 2,
               "parallel.pp = 8 exceeds model.n_layer = 4: every stage needs a layer");
  expect_error(
      "config --set parallel.pp=2 --set parallel.schedule=interleaved "
      "--set parallel.virtual_stages=2 --set parallel.microbatches=3",
      2, "interleaved 1F1B needs parallel.microbatches (m) to be a multiple of parallel.pp");
  expect_error("config --set parallel.pp=2 --set parallel.virtual_stages=2", 2,
               "parallel.virtual_stages = 2 needs schedule interleaved");
  expect_error("config --set parallel.pp=2 --set parallel.zero_stage=3", 2,
               "pipeline parallelism composes with ZeRO stage 0 or 1");
  expect_error("config --set parallel.schedule=zigzag", 2, "parallel.schedule must be gpipe");
  // The world size is checked when the ranks exist: before any training step.
  expect_error("train " + std::string(KIRI_SOURCE_DIR) +
                   "/configs/tiny-byte.json --set parallel.tp=2 --set checkpoint.dir=",
               2,
               "cannot infer parallel.dp: world 1 is not a multiple of tp 2 x pp 1 = 2 (dp = world "
               "/ (tp x pp))");
  expect_error("train " + std::string(KIRI_SOURCE_DIR) +
                   "/configs/tiny-byte.json --set parallel.dp=2 --set checkpoint.dir=",
               2, "parallel.dp x tp x pp = 2 x 1 x 1 = 2 but the world has 1 process(es)");
}

TEST(Cli, BadShardingLayoutsAreNamed) {
  expect_error("config --set parallel.zero_stage=4", 2, "parallel.zero_stage must be in [0, 3]");
  expect_error("config --set parallel.sharding_strategy=SHARD_EVERYTHING", 2,
               "parallel.sharding_strategy must be from_zero_stage | NO_SHARD | SHARD_GRAD_OP | "
               "FULL_SHARD | HYBRID_SHARD, got 'SHARD_EVERYTHING'");
  expect_error("config --set parallel.sharding_strategy=FULL_SHARD --set parallel.zero_stage=1", 2,
               "parallel.zero_stage = 1 contradicts parallel.sharding_strategy = FULL_SHARD");
  expect_error("config --set parallel.sharding_strategy=HYBRID_SHARD --set parallel.dp=4", 2,
               "HYBRID_SHARD needs parallel.shard_group_size dividing parallel.dp = 4");
  expect_error(
      "config --set parallel.sharding_strategy=HYBRID_SHARD --set parallel.dp=4 "
      "--set parallel.shard_group_size=3",
      2, "got 3");
  expect_error("config --set parallel.shard_group_size=2 --set parallel.dp=4", 2,
               "parallel.shard_group_size = 2 needs a ZeRO stage >= 1");
  expect_error("config --set train.dtype=fp8", 2, "train.dtype must be fp32 | bf16 | fp16");
  expect_error("config --set parallel.activation_checkpointing=some", 2,
               "parallel.activation_checkpointing must be none | full | every_k | selective");
  expect_error(
      "config --set parallel.activation_checkpointing=selective "
      "--set parallel.recompute_modules=core_attn,moe_act",
      2,
      "parallel.recompute_modules: unknown module 'moe_act' (valid: core_attn, layernorm, "
      "mlp_act)");
  expect_error("config --set parallel.recompute_modules=layernorm", 2,
               "parallel.recompute_modules (1 given) needs parallel.activation_checkpointing = "
               "selective");
}

// parallel.recompute_modules from --set text (comma-separated or a JSON list).
TEST(Cli, RecomputeModulesFromSetText) {
  for (const char* v : {"core_attn,layernorm", "'[\"core_attn\",\"layernorm\"]'"}) {
    Result r = kiri(std::string("config --set parallel.activation_checkpointing=selective "
                                "--set parallel.recompute_modules=") +
                    v);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("\"activation_checkpointing\": \"selective\""), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("\"core_attn\",\n      \"layernorm\""), std::string::npos) << r.output;
  }
}

TEST(Cli, BadConfigFilesAreNamed) {
  const std::string dir = temp_dir("files");
  std::ofstream(dir + "/broken.json") << "{\"model\": {\"n_layer\": 2,}";
  expect_error("config " + dir + "/broken.json", 2, "is not valid JSON");
  std::ofstream(dir + "/unknown.json") << "{\"train\": {\"stpes\": 2}}";
  expect_error("config " + dir + "/unknown.json", 2, "unknown key 'train.stpes'");
  expect_error("config " + dir + "/missing.json", 2, "cannot open config file");
  std::ofstream(dir + "/ok.json") << "{\"model.n_layer\": 3, \"train\": {\"lr\": 0.001}}";
  Result r = kiri("config " + dir + "/ok.json --set train.steps=7");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"n_layer\": 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"steps\": 7"), std::string::npos) << r.output;
}

TEST(Cli, BadDataIsNamed) {
  const std::string dir = temp_dir("data");
  expect_error("data " + dir + "/nope.txt --out " + dir + "/out --tokenizer byte", 1, "nope.txt");
  std::ofstream(dir + "/empty.txt") << "";
  expect_error("train --set data.corpus=" + dir + "/empty.txt --set data.tokenizer=byte", 1,
               "empty.txt");
  std::ofstream(dir + "/short.txt") << "tiny text";
  expect_error("train --set data.corpus=" + dir + "/short.txt --set data.tokenizer=byte", 1,
               "short");
  expect_error("sample " + dir + "/no_checkpoint", 1, "no checkpoint in");
  std::filesystem::remove_all(dir);
}

TEST(Cli, ConfigDocsAreInSyncWithTheSchema) {
  std::ifstream in(std::string(KIRI_SOURCE_DIR) + "/docs/config.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), kiri::config_markdown())
      << "docs/config.md is stale: run `build/kiri config --markdown > docs/config.md`";
}

// The same run for each architecture: GPT-2, and a Llama with grouped-query attention and
// an untied head (the --set flags that make it one).
class CliArch : public ::testing::TestWithParam<std::string> {};

TEST_P(CliArch, TrainEvalSampleEndToEnd) {
  const std::string dir = temp_dir("e2e");
  const std::string common =
      " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
      " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=4"
      " --set run.dir=" +
      dir + " --set checkpoint.dir=" + dir + "/ck --set log.metrics=" + dir + "/m.jsonl" +
      GetParam();
  Result r = kiri("train" + common + " --set train.steps=4 --set train.warmup=1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step      4/4"), std::string::npos) << r.output;
  std::ifstream metrics(dir + "/m.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 4);
  EXPECT_TRUE(fs::exists(dir + "/m.png"));
  r = kiri("train" + common + " --set train.steps=6 --set train.warmup=1 --resume " + dir + "/ck");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step      6/6"), std::string::npos) << r.output;
  r = kiri("eval " + dir + "/ck");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("val_loss"), std::string::npos) << r.output;
  r = kiri("sample " + dir + "/ck --prompt Ishmael --tokens 5 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Ishmael"), std::string::npos) << r.output;
}
INSTANTIATE_TEST_SUITE_P(Cli, CliArch,
                         ::testing::Values("",
                                           " --set model.arch=llama --set model.n_head=4"
                                           " --set model.num_key_value_heads=2"
                                           " --set model.tie_word_embeddings=false"),
                         [](const auto& info) {
                           return std::string(info.param.empty() ? "gpt2" : "llama");
                         });

// A short DDP run on 2 MPI ranks with a failure injected on rank 1.
Result launch_with_fault(const std::string& fault, const std::string& dir) {
  return kiri(
      "launch -n 2 -- train --set data.tokenizer=byte --set model.n_layer=1"
      " --set model.n_embd=32 --set model.block_size=32 --set train.seq_len=32"
      " --set train.micro_batch=2 --set train.steps=20 --set parallel.dp=2"
      " --set parallel.timeout_s=4 --set checkpoint.dir=" +
          dir +
          "/ck"
          " --set checkpoint.every=2 --set run.dir=" +
          dir + " --set log.metrics=" + dir + "/m.jsonl",
      "KIRI_FAULT=" + fault + " ASAN_OPTIONS=detect_leaks=0");
}

TEST(Cli, AKilledRankStopsTheJobAndIsNamed) {
  const std::string dir = temp_dir("kill");
  const auto start = std::chrono::steady_clock::now();
  Result r = launch_with_fault("kill:1:5", dir);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_LT(s, 60) << r.output;
  // The last complete checkpoint is intact.
  Result e = kiri("eval " + dir + "/ck");
  EXPECT_EQ(e.code, 0) << e.output;
}

TEST(Cli, AHungRankIsNamedAfterTheTimeout) {
  const std::string dir = temp_dir("hang");
  const auto start = std::chrono::steady_clock::now();
  Result r = launch_with_fault("hang:1:5", dir);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("did not complete within 4."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1 is missing"), std::string::npos) << r.output;
  // One rank's error, printed by that rank and named so.
  EXPECT_NE(r.output.find("kiri: rank 0: communication timeout: "), std::string::npos) << r.output;
  EXPECT_LT(s, 60) << r.output;
}

TEST(Cli, LaunchBuildsTheMpirunCommand) {
  std::vector<std::string> argv = kiri::cli::launch_argv(
      {"-n", "4", "--hostfile", "hosts", "--threads", "3", "--", "train", "x.json"});
  std::string line;
  for (auto& a : argv) line += a + " ";
  EXPECT_NE(line.find("mpirun -n 4 --hostfile hosts"), std::string::npos) << line;
  EXPECT_NE(line.find("OMP_NUM_THREADS=3"), std::string::npos) << line;
  EXPECT_NE(line.find(" train x.json"), std::string::npos) << line;
  EXPECT_THROW(kiri::cli::launch_argv({"-n", "2"}), kiri::Error);
}

// --hosts a:2,b:2 (torchrun's and Open MPI's habit of naming hosts on the command line).
TEST(Cli, LaunchTakesHostsOnTheCommandLine) {
  std::string line;
  for (auto& a : kiri::cli::launch_argv({"-n", "4", "--hosts", "a:2,b:2", "--", "train"}))
    line += a + " ";
  EXPECT_NE(line.find("mpirun -n 4 --host a:2,b:2 "), std::string::npos) << line;
  auto error = [](std::vector<std::string> argv) {
    return kiri::testing::error_of([&] { kiri::cli::launch_argv(argv); });
  };
  EXPECT_NE(error({"-n", "5", "--hosts", "a:2,b:2", "--", "train"})
                .find("--hosts a:2,b:2 has 4 ranks for -n 5"),
            std::string::npos);
  EXPECT_NE(error({"-n", "2", "--hosts", "a:2,a:1", "--", "train"}).find("host a is named twice"),
            std::string::npos);
  EXPECT_NE(error({"-n", "2", "--hosts", "a:0", "--", "train"})
                .find("host a has 0 ranks, not a count >= 1"),
            std::string::npos);
  EXPECT_NE(error({"-n", "2", "--hosts", "a:2", "--hostfile", "h", "--", "train"})
                .find("give --hostfile or --hosts, not both"),
            std::string::npos);
}

}  // namespace
