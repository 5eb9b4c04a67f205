// Llama folders in and out, against code that is not kiri's: a Llama in plain PyTorch
// (tests/cli/hf_llama_torch.py, written from transformers' LlamaForCausalLM) writes random
// weights in shards with an index; kiri train --init-from reads them and kiri's logits are
// the reference's; kiri trains from them and exports in shards, and the reference's logits of
// the export are kiri's. MHA (untied head), GQA (tied) and MQA with Llama 3 rope scaling;
// kiri's logits come from kiri sample --logits. Bad folders are named checkpoint errors (no
// torch needed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

const std::string kScript = std::string(KIRI_SOURCE_DIR) + "/tests/cli/hf_llama_torch.py";
// The byte tokenizer: the prompt's token ids are its bytes.
const char* kPrompt = "Call me Ishmael";
const char* kPromptIds = "67,97,108,108,32,109,101,32,73,115,104,109,97,101,108";
constexpr int64_t kPromptTokens = 15, kVocab = 257;

// The Python that imports torch (Debian's python3-torch: make setup-test), "" when none.
std::string torch_python() {
  for (const char* p : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(p) + " -c 'import torch, numpy' >/dev/null 2>&1").c_str()) == 0)
      return p;
  return "";
}

#define SKIP_WITHOUT_TORCH(py)                                                             \
  if ((py).empty())                                                                        \
  GTEST_SKIP() << "torch is missing (python3 -c 'import torch' fails): `make setup-test` " \
                  "installs Debian's python3-torch, the reference these tests compare with"

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

void write_json(const std::string& path, const json& j) {
  std::ofstream(path) << j.dump(2);
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v(fs::exists(path) ? fs::file_size(path) / sizeof(float) : 0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// A tiny Llama's LlamaConfig: 2 layers of 32 (4 query heads of 8), byte vocabulary.
json hf_config(int kv_heads, bool tied, bool llama3) {
  json c = {{"hidden_size", 32},
            {"intermediate_size", 48},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"num_key_value_heads", kv_heads},
            {"vocab_size", kVocab},
            {"max_position_embeddings", 64},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", llama3 ? 100.0 : 10000.0},
            {"tie_word_embeddings", tied}};
  // Head width 8, theta 100: wavelengths 6.3, 20, 63, 199 against 32 / 1 and 32 / 4: one
  // frequency kept, one smoothed, two divided by the factor.
  if (llama3)
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 32}};
  return c;
}

// The same model as kiri's --set keys (docs/models.md's table).
std::string kiri_sets(const json& c) {
  std::string s = " --set data.tokenizer=byte --set model.arch=llama";
  const std::pair<const char*, const char*> keys[] = {
      {"model.n_layer", "num_hidden_layers"},
      {"model.n_head", "num_attention_heads"},
      {"model.num_key_value_heads", "num_key_value_heads"},
      {"model.n_embd", "hidden_size"},
      {"model.intermediate_size", "intermediate_size"},
      {"model.block_size", "max_position_embeddings"},
      {"model.rms_norm_eps", "rms_norm_eps"},
      {"model.rope_theta", "rope_theta"},
      {"model.tie_word_embeddings", "tie_word_embeddings"}};
  for (const auto& [kiri, hf] : keys) s += std::string(" --set ") + kiri + "=" + c[hf].dump();
  if (c.contains("rope_scaling"))
    for (const auto& [k, v] : c["rope_scaling"].items())
      s += " --set model.rope_scaling." + k + "=" +
           (v.is_string() ? v.get<std::string>() : v.dump());
  return s;
}

const char* kTrain =
    " --set train.seq_len=32 --set train.micro_batch=4 --set train.warmup=1"
    " --set train.eval_every=0 --set train.eval_batches=1";

// kiri sample --logits of checkpoint `ckpt` into dir/kiri.logits.
std::vector<float> kiri_logits(const std::string& ckpt, const std::string& dir) {
  const Result r = run_kiri("sample " + ckpt + " --tokens 0 --prompt '" + kPrompt + "' --logits " +
                            dir + "/kiri.logits");
  EXPECT_EQ(r.code, 0) << r.output;
  return read_floats(dir + "/kiri.logits");
}

std::vector<float> torch_logits(const std::string& py, const std::string& folder,
                                const std::string& dir) {
  const Result r = run_shell(py + " " + kScript + " logits " + folder + " --ids " + kPromptIds +
                             " --out " + dir + "/torch.logits");
  EXPECT_EQ(r.code, 0) << r.output;
  return read_floats(dir + "/torch.logits");
}

// Equal within 1e-5 of the largest logit (fp32 sums in another order), and not trivially.
void expect_same_logits(const std::vector<float>& kiri, const std::vector<float>& ref) {
  ASSERT_EQ(kiri.size(), static_cast<size_t>(kPromptTokens * kVocab));
  ASSERT_EQ(ref.size(), kiri.size());
  double scale = 0, diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(double{ref[i]}));
    const double d = std::fabs(double{kiri[i]} - double{ref[i]});
    if (d > diff) diff = d, worst = i;
  }
  EXPECT_GT(scale, 1.0) << "logits this small compare nothing";
  EXPECT_LE(diff, 1e-5 * scale) << "logit " << worst % kVocab << " at position " << worst / kVocab
                                << ": kiri " << kiri[worst] << ", torch " << ref[worst]
                                << " (largest |logit| " << scale << ")";
}

struct Case {
  const char* name;
  int kv_heads;
  bool tied, llama3;
};

class HfLlama : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { dir_ = kiri::testing::temp_dir(GetParam().name); }
  void TearDown() override { fs::remove_all(dir_); }
  json config() const { return hf_config(GetParam().kv_heads, GetParam().tied, GetParam().llama3); }
  std::string dir_;
};

// The reference's random weights (sharded, with an index) under its HF names.
std::string torch_folder(const std::string& py, const std::string& dir, const json& config) {
  const std::string folder = dir + "/torch";
  const Result r = run_shell(py + " " + kScript + " write " + folder + " --config '" +
                             config.dump() + "' --seed 7 --max-shard-bytes 20000");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(folder + "/model.safetensors.index.json")) << r.output;
  return folder;
}

// kiri train --init-from the reference's folder at learning rate 0: the step-1 checkpoint
// holds its weights unchanged, and kiri's logits of them are the reference's.
TEST_P(HfLlama, KiriInitFromTorchFolderHasTorchLogits) {
  const std::string py = torch_python();
  SKIP_WITHOUT_TORCH(py);
  const std::string folder = torch_folder(py, dir_, config());
  const Result r = run_kiri(
      "train --init-from " + folder + " --set data.tokenizer=byte" + kTrain +
      " --set train.steps=1 --set train.lr=0 --set train.min_lr=0 --set run.dir=" + dir_ + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized the weights from " + folder), std::string::npos) << r.output;
  expect_same_logits(kiri_logits(dir_ + "/run/checkpoints/step_00000001", dir_),
                     torch_logits(py, folder, dir_));
}

// kiri trains 3 steps from the reference's weights (far from kiri's own init: norm weights
// around 1, not 1) and exports the checkpoint in shards; the reference reads the export and
// gives kiri's logits of the checkpoint.
TEST_P(HfLlama, TorchReadsKiriExportWithKiriLogits) {
  const std::string py = torch_python();
  SKIP_WITHOUT_TORCH(py);
  const json c = config();
  const std::string folder = torch_folder(py, dir_, c);
  Result r = run_kiri("train --init-from " + folder + " --set data.tokenizer=byte" + kTrain +
                      " --set train.steps=3 --set train.lr=1e-2 --set run.dir=" + dir_ + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string ckpt = dir_ + "/run/checkpoints/step_00000003";
  r = run_kiri("export " + ckpt + " --out " + dir_ + "/hf --max-shard-size 20KB");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir_ + "/hf/model.safetensors.index.json")) << r.output;
  const json written = read_json(dir_ + "/hf/config.json");
  for (const auto& [key, value] : c.items()) EXPECT_EQ(written[key], value) << key;
  EXPECT_EQ(
      read_json(dir_ + "/hf/model.safetensors.index.json")["weight_map"].contains("lm_head.weight"),
      !GetParam().tied);
  const std::vector<float> kiri = kiri_logits(ckpt, dir_);
  expect_same_logits(kiri, torch_logits(py, dir_ + "/hf", dir_));
  // Trained: not the reference's own weights' logits.
  const std::vector<float> before = torch_logits(py, folder, dir_);
  ASSERT_EQ(before.size(), kiri.size());
  double moved = 0;
  for (size_t i = 0; i < kiri.size(); ++i)
    moved = std::max(moved, std::fabs(double{kiri[i]} - double{before[i]}));
  EXPECT_GT(moved, 1e-2) << "3 steps at lr 1e-2 left the logits where they were";
}

INSTANTIATE_TEST_SUITE_P(Attention, HfLlama,
                         ::testing::Values(Case{"mha_untied", 4, false, false},
                                           Case{"gqa_tied", 2, true, false},
                                           Case{"mqa_llama3", 1, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// What kiri cannot load from a Llama folder: the file, the key and the numbers, exit 1.
TEST(HfLlamaFolder, BadFoldersAreNamedCheckpointErrors) {
  const std::string dir = kiri::testing::temp_dir("bad");
  const json c = hf_config(4, false, false);
  Result r = run_kiri("train" + kiri_sets(c) + kTrain +
                      " --set train.steps=1 --set run.dir=" + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string good = dir + "/good";
  r = run_kiri("export " + dir + "/run/checkpoints --out " + good + " --max-shard-size 20KB");
  ASSERT_EQ(r.code, 0) << r.output;
  int n = 0;
  // A copy of the good folder, changed by `edit`, given to --init-from.
  const auto expect = [&](const std::function<void(const std::string&)>& edit,
                          const std::vector<std::string>& needles, int code = 1,
                          const std::string& extra = " --set train.seq_len=32") {
    const std::string bad = dir + "/bad" + std::to_string(n++);
    fs::copy(good, bad);
    edit(bad);
    const Result e = run_kiri("train --init-from " + bad + extra + " --set run.dir=" + dir + "/x");
    EXPECT_EQ(e.code, code) << e.output;
    for (const std::string& s : needles) EXPECT_NE(e.output.find(s), std::string::npos) << e.output;
    EXPECT_FALSE(fs::exists(dir + "/x/metrics.jsonl"));
  };
  const auto set_key = [](const std::string& key, const json& value) {
    return [=](const std::string& d) {
      json j = read_json(d + "/config.json");
      j[key] = value;
      write_json(d + "/config.json", j);
    };
  };
  const auto drop_tensor = [](const std::string& name) {
    return [=](const std::string& d) {
      json j = read_json(d + "/model.safetensors.index.json");
      j["weight_map"].erase(name);
      write_json(d + "/model.safetensors.index.json", j);
    };
  };
  expect(set_key("attention_bias", true),
         {"config.json: attention_bias = true is not supported", "no bias"});
  expect(set_key("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}),
         {"config.json: rope_scaling.rope_type = \"yarn\" is not supported"});
  // transformers 5's spelling: exit 0 before the fix.
  expect(set_key("rope_parameters", {{"rope_type", "yarn"}, {"factor", 4}}),
         {"config.json: rope_parameters.rope_type = \"yarn\" is not supported"});
  expect(set_key("sliding_window", 16),
         {"config.json: sliding_window = 16 is not supported: kiri does not know this key"});
  // A kiri.tokenizer the folder cannot give: named (before the fix: ignored, and the error
  // blamed the vocabulary's size).
  expect(set_key("kiri", {{"format_version", 1}, {"tokenizer", "no/such/tokenizer"}}),
         {"config.json: kiri.tokenizer = \"no/such/tokenizer\" is neither \"byte\" nor "
          "\"gpt2\" nor an existing path"});
  // Both forms: transformers loads model.safetensors, kiri loaded the shards before the fix.
  expect(
      [](const std::string& d) {
        for (const auto& e : fs::directory_iterator(d))
          if (e.path().filename().string().rfind("model-00001-of-", 0) == 0)
            fs::copy_file(e.path(), d + "/model.safetensors");
      },
      {"holds both model.safetensors and model.safetensors.index.json: transformers loads the "
       "first"});
  expect(drop_tensor("model.layers.1.mlp.up_proj.weight"),
         {"the model's tensor 'model.layers.1.mlp.up_proj.weight' is missing"});
  expect(drop_tensor("lm_head.weight"), {"the model's tensor 'lm_head.weight' is missing"});
  // Weights for 4 key/value heads read as 2: k_proj is [32, 32] on disk, [16, 32] in kiri.
  expect(set_key("num_key_value_heads", 2),
         {".safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 32], "
          "the model's model.layers.0.self_attn.k_proj.weight is [16, 32]"});
  // Said tied, but the folder's lm_head.weight is its own.
  expect(set_key("tie_word_embeddings", true),
         {"lm_head.weight differs from model.embed_tokens.weight at element ",
          "config.json's tie_word_embeddings is true"});
  expect([](const std::string&) {},
         {"train.seq_len = 128 exceeds the model's max_position_embeddings = 64"}, 2, "");
  fs::remove_all(dir);
}

}  // namespace
