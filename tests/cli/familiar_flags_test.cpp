// The familiar flags (--lr, --max-steps, --batch-size, ...: cli/config_flags.h) are their
// config keys: each gives what its --set gives, in kiri config, train and plan; a key given
// twice is named; train.epochs counts the steps from the training split.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace {

using kiri::testing::Result;
using kiri::testing::run_kiri;
using nlohmann::json;

bool has(const Result& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

json printed_config(const Result& r) {
  const size_t begin = r.output.find("{\n"), end = r.output.rfind("\n}");
  EXPECT_NE(begin, std::string::npos) << r.output;
  return json::parse(r.output.substr(begin, end + 2 - begin));
}

TEST(FamiliarFlags, EachFlagGivesWhatItsSetGives) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"--lr 0.002", "train.lr=0.002"},
      {"--max-steps 77", "train.steps=77"},
      {"--epochs 3", "train.epochs=3"},
      {"--batch-size 3", "train.micro_batch=3"},
      {"--grad-accum 5", "train.grad_accum=5"},
      {"--output-dir runs/elsewhere", "run.dir=runs/elsewhere"},
      {"--seed 1234", "train.seed=1234"},
      {"--bf16", "train.dtype=bf16"},
      {"--fp16", "train.dtype=fp16"}};
  const json defaults = printed_config(run_kiri("config"));
  for (const auto& [flag, set] : pairs) {
    const Result by_flag = run_kiri("config " + flag), by_set = run_kiri("config --set " + set);
    ASSERT_EQ(by_flag.code, 0) << flag << "\n" << by_flag.output;
    ASSERT_EQ(by_set.code, 0) << set << "\n" << by_set.output;
    EXPECT_EQ(printed_config(by_flag), printed_config(by_set)) << flag;
    EXPECT_NE(printed_config(by_flag), defaults) << flag;  // it changed something
  }
  // kiri train reads them too (--dry-run prints the config it would run).
  const Result r = run_kiri("train --dry-run --lr 0.002 --bf16 --batch-size 3 --set run.dir=x");
  ASSERT_EQ(r.code, 0) << r.output;
  const json c = printed_config(r);
  EXPECT_EQ(c["train"]["lr"], 0.002);
  EXPECT_EQ(c["train"]["dtype"], "bf16");
  EXPECT_EQ(c["train"]["micro_batch"], 3);
}

TEST(FamiliarFlags, AKeyGivenTwiceIsNamed) {
  Result r = run_kiri("config --lr 0.002 --set train.lr=0.003");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r,
                  "--lr and --set train.lr=0.003 both give train.lr: give one (--lr is short "
                  "for train.lr)"))
      << r.output;
  r = run_kiri("config --bf16 --fp16");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "--bf16 and --fp16 both give train.dtype")) << r.output;
  r = run_kiri("config --max-steps 5 --epochs 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "train.steps and train.epochs = 2 are both given")) << r.output;
  r = run_kiri("config --set learning_rate=0.1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "that is a Hugging Face TrainingArguments name; kiri's key is train.lr"))
      << r.output;
}

// kiri plan: --bf16/--fp16 and --batch-size are its --dtype and --micro-batch.
TEST(FamiliarFlags, PlanReadsThemAsItsOwn) {
  const std::string layout = "plan --model gpt2-124M --dp 2 --json";
  for (const auto& [flag, own] : std::vector<std::pair<std::string, std::string>>{
           {"--fp16", "--dtype fp16"}, {"--batch-size 4", "--micro-batch 4"}}) {
    const Result a = run_kiri(layout + " " + flag), b = run_kiri(layout + " " + own);
    ASSERT_EQ(a.code, 0) << a.output;
    ASSERT_EQ(b.code, 0) << b.output;
    EXPECT_EQ(a.output, b.output) << flag;
    EXPECT_NE(a.output, run_kiri(layout).output) << flag;
  }
  const Result r = run_kiri(layout + " --dtype bf16 --fp16");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "--dtype and --fp16 both give train.dtype")) << r.output;
}

// A 2000-byte text, one token a byte: 1800 training tokens (val_fraction 0.1), so
// (1800 - 1) / 16 = 112 samples of 16 tokens. 0.25 epochs of 4 x 2 sequences a step:
// ceil(0.25 x 112 / 8) = ceil(3.5) = 4 steps.
TEST(FamiliarFlags, EpochsCountTheStepsFromTheTrainingSplit) {
  const std::string dir = kiri::testing::temp_dir("epochs");
  std::ofstream(dir + "/text.txt") << std::string(2000, 'a');
  const Result r =
      run_kiri("train --epochs 0.25 --batch-size 4 --grad-accum 2 --output-dir " + dir +
               "/run --set data.corpus=" + dir +
               "/text.txt --set data.tokenizer=byte --set model.n_layer=1 --set model.n_head=2"
               " --set model.n_embd=16 --set model.block_size=16 --set train.seq_len=16"
               " --set train.eval_every=0 --set train.eval_batches=1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "train.epochs 0.25: 4 steps of 8 sequences over the 112 training samples"))
      << r.output;
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) steps += json::parse(line)["step"] > 0;
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(json::parse(std::ifstream(dir + "/run/config.json"))["train"]["steps"], 4);
}

}  // namespace
