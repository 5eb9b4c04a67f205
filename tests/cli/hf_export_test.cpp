// Models in and out, through the binary: a checkpoint is a Hugging Face model folder, kiri
// export writes one in another dtype and shard size, code that is not kiri's (a NumPy GPT-2,
// tests/cli/hf_gpt2_numpy.py) reads it and gets kiri sample's greedy tokens, and
// --init-from of the export starts where the model it came from stands.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;
using kiri::testing::run_shell;
using nlohmann::json;

// A byte-level model of 2 layers of 64 (2 heads), sequences of 32 tokens.
std::string model_args() {
  return " --set data.tokenizer=byte --set model.n_layer=2 --set model.n_head=2"
         " --set model.n_embd=64 --set model.block_size=64 --set train.seq_len=32"
         " --set train.micro_batch=8 --set train.warmup=2 --set train.eval_every=0"
         " --set train.eval_batches=1 --set train.lr=3e-3";
}

// The Python with NumPy: Debian's (scripts/bootstrap.sh installs python3-numpy), else the
// PATH's.
std::string python() {
  for (const char* p : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(p) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return p;
  return "";
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// The loss of metrics row `step` (1-based).
double loss_at(const std::string& metrics, int step) {
  std::ifstream f(metrics);
  std::string line;
  while (std::getline(f, line)) {
    const json j = json::parse(line);
    if (j["step"] == step) return j["loss"].get<double>();
  }
  ADD_FAILURE() << "no step " << step << " in " << metrics;
  return NAN;
}

class HfExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = kiri::testing::temp_dir("export");
    const Result r =
        run_kiri("train" + model_args() + " --set train.steps=150 --set run.dir=" + dir_ +
                 "/run --set checkpoint.max_shard_size=100KB");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string ckpt() { return dir_ + "/run/checkpoints/step_00000150"; }
  static std::string dir_;
};
std::string HfExport::dir_;

TEST_F(HfExport, CheckpointIsAShardedModelFolder) {
  const json c = read_json(ckpt() + "/config.json");
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_head"], 2);
  EXPECT_EQ(c["n_embd"], 64);
  EXPECT_EQ(c["n_positions"], 64);
  EXPECT_EQ(c["vocab_size"], 257);
  EXPECT_EQ(c["layer_norm_epsilon"], 1e-5);
  EXPECT_EQ(c["activation_function"], "gelu_new");
  EXPECT_EQ(c["torch_dtype"], "float32");
  EXPECT_EQ(c["tie_word_embeddings"], true);
  EXPECT_EQ(c["eos_token_id"], 256);  // the byte tokenizer's end-of-text token
  // 2 x (64 + 64 + 3 x 64^2 ...) fp32 (wte 257 x 64): 482,560 bytes over 100 KB shards.
  const json index = read_json(ckpt() + "/model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 482560);
  EXPECT_EQ(index["weight_map"].size(), 4u + 2 * 12u);
  EXPECT_EQ(index["weight_map"]["transformer.wte.weight"], "model-00001-of-00007.safetensors");
  EXPECT_TRUE(fs::exists(ckpt() + "/model-00007-of-00007.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt() + "/model.safetensors"));
  // Resume reads the shards: the run continues from step 150.
  const Result r = run_kiri("train --resume " + ckpt() +
                            " --set train.steps=151 --set run.dir=" + dir_ + "/resumed");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 150"), std::string::npos) << r.output;
}

TEST_F(HfExport, NumpyGpt2GivesKiriSamplesGreedyTokens) {
  const std::string py = python();
  ASSERT_FALSE(py.empty()) << "python3 with NumPy is missing: run scripts/bootstrap.sh";
  const std::string out = dir_ + "/fp32";
  Result r = run_kiri("export " + ckpt() + " --out " + out + " --max-shard-size 200KB");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/model-00003-of-00003.safetensors")) << r.output;
  r = run_kiri("sample " + ckpt() +
               " --temperature 0 --stop-at-eos --tokens 40 --prompt 'Call me Ishmael'");
  ASSERT_EQ(r.code, 0) << r.output;
  std::string kiri_ids;  // the byte tokenizer: each output byte is a token id
  std::string text = r.output.substr(0, r.output.size() - 1);  // sample's newline
  for (unsigned char ch : text) kiri_ids += (kiri_ids.empty() ? "" : " ") + std::to_string(ch);
  const Result np =
      run_shell(py + " " + KIRI_SOURCE_DIR + "/tests/cli/hf_gpt2_numpy.py generate " + out +
                " --prompt-ids 67,97,108,108,32,109,101,32,73,115,104,109,97,101,108 --tokens 40");
  ASSERT_EQ(np.code, 0) << np.output;
  EXPECT_EQ(np.output, kiri_ids + "\n");
  // A trained model says something: not one byte repeated.
  EXPECT_GE(std::set<unsigned char>(text.begin() + 15, text.end()).size(), 3u) << text;

  // bf16 on disk: the same weights rounded to bf16's 8 bits.
  const std::string bf16 = dir_ + "/bf16";
  r = run_kiri("export " + ckpt() + " --out " + bf16 + " --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_json(bf16 + "/config.json")["torch_dtype"], "bfloat16");
  EXPECT_TRUE(fs::exists(bf16 + "/model.safetensors"));
  const Result cmp = run_shell(py + " " + KIRI_SOURCE_DIR + "/tests/cli/hf_gpt2_numpy.py compare " +
                               out + " " + bf16);
  ASSERT_EQ(cmp.code, 0) << cmp.output;
  const double diff = std::stod(cmp.output);
  EXPECT_GT(diff, 0);
  EXPECT_LT(diff, 0.02) << "bf16 rounds |w| < 4 to within 2^-7";
}

TEST_F(HfExport, InitFromTheExportGivesTheSameFirstStepLoss) {
  const std::string out = dir_ + "/init";
  Result r = run_kiri("export " + ckpt() + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  double losses[2];
  int i = 0;
  for (const std::string& from : {out, dir_ + "/run/checkpoints"}) {
    const std::string run = dir_ + "/ft" + std::to_string(i);
    // No model keys: the shape (and the byte tokenizer) come from config.json.
    r = run_kiri("train --init-from " + from +
                 " --set train.seq_len=32 --set train.micro_batch=4 --set train.steps=1"
                 " --set train.eval_batches=1 --set run.dir=" +
                 run);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("initialized the weights from"), std::string::npos) << r.output;
    losses[i++] = loss_at(run + "/metrics.jsonl", 1);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6 * losses[1]);
  // A trained model: well under the 5.55 nats of a uniform guess over 257 tokens.
  EXPECT_LT(losses[0], 4.5);
}

TEST_F(HfExport, BadRequestsAreNamedErrors) {
  const std::string used = dir_ + "/used";
  fs::create_directories(used);
  std::ofstream(used + "/x") << "x";
  Result r = run_kiri("export " + ckpt() + " --out " + used);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("exists and is not an empty folder"), std::string::npos) << r.output;
  r = run_kiri("export " + ckpt() + " --out " + dir_ + "/e --dtype int8");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--dtype must be fp32, bf16 or fp16, got 'int8'"), std::string::npos);
  r = run_kiri("export " + ckpt() + " --out " + dir_ + "/e --max-shard-size 0");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-shard-size must be a positive size"), std::string::npos);
  r = run_kiri("train --set checkpoint.max_shard_size=0 --set run.dir=" + dir_ + "/x");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint.max_shard_size must be a positive size"), std::string::npos)
      << r.output;
  r = run_kiri("train --init-from " + ckpt() + " --resume auto --set run.dir=" + dir_ + "/x");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--init-from starts a new run"), std::string::npos) << r.output;
  r = run_kiri("train --init-from " + ckpt() + " --set model.n_embd=128 --set run.dir=" + dir_ +
               "/x");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.n_embd = 128 contradicts"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.n_embd = 64"), std::string::npos) << r.output;
  r = run_kiri("train --init-from " + ckpt() + " --set run.dir=" + dir_ + "/x");
  EXPECT_EQ(r.code, 2) << r.output;  // train.seq_len's default of 128
  EXPECT_NE(r.output.find("train.seq_len = 128 exceeds the model's n_positions = 64"),
            std::string::npos)
      << r.output;
  r = run_kiri("train --init-from " + used + " --set run.dir=" + dir_ + "/x");
  EXPECT_EQ(r.code, 1) << r.output;  // a checkpoint error
  EXPECT_NE(r.output.find("holds no config.json"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ + "/x/metrics.jsonl"));
  // A model folder whose shard is gone.
  const std::string broken = dir_ + "/broken";
  fs::copy(ckpt(), broken);
  fs::remove(broken + "/model-00003-of-00007.safetensors");
  r = run_kiri("train --init-from " + broken + " --set train.seq_len=32 --set run.dir=" + dir_ +
               "/x");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("names model-00003-of-00007.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("but the file is missing"), std::string::npos) << r.output;
}

// GPT-2's tokenizer: its files, under their Hugging Face names, and what AutoTokenizer reads.
TEST(HfExportGpt2, CopiesTheTokenizerFiles) {
  const std::string dir = kiri::testing::temp_dir("gpt2");
  const Result r = run_kiri(
      "train --set model.n_layer=1 --set model.n_head=1 --set model.n_embd=16"
      " --set model.block_size=16 --set train.seq_len=16 --set train.micro_batch=1"
      " --set train.steps=1 --set train.eval_batches=1 --set run.dir=" +
      dir);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string step = dir + "/checkpoints/step_00000001";
  const json c = read_json(step + "/config.json");
  EXPECT_EQ(c["vocab_size"], 50257);
  EXPECT_EQ(c["eos_token_id"], 50256);
  EXPECT_EQ(c["bos_token_id"], 50256);
  EXPECT_EQ(fs::file_size(step + "/vocab.json"),
            fs::file_size(std::string(KIRI_TEST_DATA_DIR) + "/gpt2/encoder.json"));
  EXPECT_EQ(fs::file_size(step + "/merges.txt"),
            fs::file_size(std::string(KIRI_TEST_DATA_DIR) + "/gpt2/vocab.bpe"));
  const json t = read_json(step + "/tokenizer_config.json");
  EXPECT_EQ(t["tokenizer_class"], "GPT2Tokenizer");
  EXPECT_EQ(t["eos_token"], "<|endoftext|>");
  EXPECT_EQ(t["model_max_length"], 16);
  EXPECT_EQ(read_json(step + "/special_tokens_map.json")["bos_token"], "<|endoftext|>");
  fs::remove_all(dir);
}

}  // namespace
