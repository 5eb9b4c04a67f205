// kiri sample and kiri eval on any model folder: a checkpoint and its export give the same
// text for a seed and the same validation loss; --top-k 1 is greedy; seeds reproduce and
// differ; --prompts reads several prompts; eval --data reads other shards.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/background_job.h"
#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;

using kiri::testing::read_text;

class SampleEval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = kiri::testing::temp_dir("sample_eval");
    // A byte-level model of 1 layer of 32, trained a little so that it says something.
    Result r = run_kiri(
        "train --set data.tokenizer=byte --set model.n_layer=1 --set model.n_head=2"
        " --set model.n_embd=32 --set model.block_size=64 --set train.seq_len=32"
        " --set train.micro_batch=8 --set train.warmup=2 --set train.eval_every=0"
        " --set train.eval_batches=2 --set train.lr=3e-3 --set train.steps=30 --set run.dir=" +
        dir_ + "/run");
    ASSERT_EQ(r.code, 0) << r.output;
    r = run_kiri("export " + ckpt() + " --out " + folder());
    ASSERT_EQ(r.code, 0) << r.output;
    // Other shards: a later part of the book, made by kiri data.
    std::ofstream(dir_ + "/text.txt")
        << read_text(std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt").substr(200000, 20000);
    r = run_kiri("data " + dir_ + "/text.txt --tokenizer byte --out " + shards());
    ASSERT_EQ(r.code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string ckpt() { return dir_ + "/run/checkpoints/step_00000030"; }
  static std::string folder() { return dir_ + "/export"; }
  static std::string shards() { return dir_ + "/shards"; }
  // kiri sample's output; --prompt 'Call me' unless args give a prompt.
  static std::string sample(const std::string& model, const std::string& args) {
    const std::string prompt =
        args.find("--prompt") == std::string::npos ? " --prompt 'Call me'" : "";
    const Result r = run_kiri("sample " + model + prompt + " --tokens 24 " + args);
    EXPECT_EQ(r.code, 0) << r.output;
    return r.output;
  }
  static std::string dir_;
};
std::string SampleEval::dir_;

TEST_F(SampleEval, TheExportSamplesAsItsCheckpoint) {
  const std::string args = "--temperature 1 --top-k 40 --top-p 0.9 --seed 3";
  const std::string text = sample(ckpt(), args);
  ASSERT_EQ(text.rfind("Call me", 0), 0u) << text;
  EXPECT_EQ(sample(folder(), args), text);
  EXPECT_EQ(sample(ckpt(), args), text);  // the seed reproduces
  EXPECT_NE(sample(ckpt(), "--temperature 1 --top-k 40 --top-p 0.9 --seed 4"), text);
  // --top-k 1 and --top-p near 0 keep the likeliest token alone: greedy, whatever the seed.
  const std::string greedy = sample(folder(), "--temperature 0");
  EXPECT_EQ(sample(folder(), "--temperature 1.5 --top-k 1 --seed 9"), greedy);
  EXPECT_EQ(sample(ckpt(), "--temperature 1.5 --top-p 0.000001 --seed 8"), greedy);
  EXPECT_NE(greedy, text);
}

TEST_F(SampleEval, PromptsFromAFile) {
  const std::string a = sample(folder(), "--temperature 0 --prompt 'It was'");
  const std::string b = sample(folder(), "--temperature 0 --prompt 'The whale'");
  std::ofstream(dir_ + "/prompts.txt") << "It was\n\nThe whale\n";
  std::ofstream(dir_ + "/prompts.jsonl")
      << "{\"prompt\": \"It was\"}\n{\"prompt\": \"The whale\"}\n";
  for (const char* f : {"/prompts.txt", "/prompts.jsonl"}) {
    const Result r =
        run_kiri("sample " + folder() + " --temperature 0 --tokens 24 --prompts " + dir_ + f);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output, a + b) << f;
  }
  std::ofstream(dir_ + "/bad.jsonl") << "{\"prompt\": \"It was\"}\n{\"text\": \"x\"}\n";
  Result r = run_kiri("sample " + folder() + " --prompts " + dir_ + "/bad.jsonl");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl line 2: not a JSON object with a non-empty string"),
            std::string::npos)
      << r.output;
  r = run_kiri("sample " + folder() + " --prompt x --prompts " + dir_ + "/prompts.txt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--prompt and --prompts both give the prompts"), std::string::npos);
  r = run_kiri("sample " + folder() + " --top-p 0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--top-p must be in (0, 1], got 0"), std::string::npos) << r.output;
}

TEST_F(SampleEval, AFolderWithoutATokenizerNeedsOne) {
  const std::string bare = dir_ + "/bare";
  fs::create_directories(bare);
  fs::copy_file(folder() + "/model.safetensors", bare + "/model.safetensors");
  nlohmann::json config = nlohmann::json::parse(read_text(folder() + "/config.json"));
  config.erase("kiri");  // the block naming the tokenizer, which transformers does not write
  std::ofstream(bare + "/config.json") << config.dump();
  Result r = run_kiri("sample " + bare + " --tokens 3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(bare + " holds no tokenizer"), std::string::npos) << r.output;
  EXPECT_EQ(sample(bare, "--temperature 0 --tokenizer byte"), sample(folder(), "--temperature 0"));
}

// "val_loss X" of kiri eval's output.
std::string val_loss(const Result& r) {
  EXPECT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find("val_loss ");
  return at == std::string::npos ? ""
                                 : r.output.substr(at + 9, r.output.find(' ', at + 9) - at - 9);
}

TEST_F(SampleEval, TheExportEvaluatesAsItsCheckpoint) {
  const std::string own = val_loss(run_kiri("eval " + ckpt()));
  const std::string other = val_loss(run_kiri("eval " + ckpt() + " --data " + shards()));
  // The folder knows no seq_len or batch: the checkpoint's, given.
  const std::string exported =
      val_loss(run_kiri("eval " + folder() + " --data " + shards() +
                        " --set train.seq_len=32 --set train.micro_batch=8 --batches 2"));
  ASSERT_FALSE(own.empty());
  EXPECT_EQ(exported, other);  // to the last digit printed
  EXPECT_NE(own, other);       // other shards, another loss
  const double loss = std::stod(other);
  EXPECT_GT(loss, 1.0);  // trained 30 steps: well below ln 257 = 5.55, far from 0
  EXPECT_LT(loss, 5.0);
}

}  // namespace
