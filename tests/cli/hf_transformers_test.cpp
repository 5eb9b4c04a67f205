// kiri against transformers itself (5.23 from PyPI, in the test venv scripts/test-venv.sh makes
// once under the user's cache; skipped naming the reason when it cannot be made). Folders that
// transformers' save_pretrained writes (GPT-2; Llama MHA, GQA and MQA; tied and untied; Llama 3
// scaling with theta 500000, written only as rope_parameters; bf16; sharded) load in kiri with
// transformers' logits and greedy tokens; kiri's exports load in transformers with kiri's, and
// come back to kiri the same after transformers loads and saves them again; the exports load
// in transformers 4.46 (scripts/test-venv.sh --transformers4) too. One Python process per
// direction (tests/cli/hf_transformers.py): torch's import is the slow part.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "cli/test_venv.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;
using kiri::testing::run_shell;
using kiri::testing::venv_python;
using nlohmann::json;

const std::string kScript = std::string(KIRI_SOURCE_DIR) + "/tests/cli/hf_transformers.py";
// The byte tokenizer: the prompt's ids are its bytes; 256 is end-of-text (bos and eos).
const char* kPrompt = "Call me Ishmael";
const std::vector<int> kPromptIds = {67, 97,  108, 108, 32, 109, 101, 32,
                                     73, 115, 104, 109, 97, 101, 108};
constexpr int64_t kVocab = 257, kNewTokens = 20;
const char* kTrain =
    " --set data.tokenizer=byte --set train.seq_len=32 --set train.micro_batch=2"
    " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1";

#define PYTHON_OR_SKIP(py, option)                   \
  std::string why_;                                  \
  const std::string py = venv_python(&why_, option); \
  if (py.empty()) GTEST_SKIP() << "no transformers: " << why_

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v(fs::exists(path) ? fs::file_size(path) / sizeof(float) : 0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void run_python(const std::string& py, const json& ops) {
  std::string quoted = ops.dump();  // single-quoted for the shell: no ' in these ops
  const Result r = run_shell(py + " " + kScript + " '" + quoted + "'");
  ASSERT_EQ(r.code, 0) << r.output;
}

// Within 1e-5 of the largest logit (max abs diff / max abs logit), and not trivially.
void expect_same_logits(const std::vector<float>& kiri, const std::vector<float>& ref,
                        const std::string& what) {
  ASSERT_EQ(kiri.size(), kPromptIds.size() * kVocab) << what;
  ASSERT_EQ(ref.size(), kiri.size()) << what;
  double scale = 0, diff = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(double{ref[i]}));
    const double d = std::fabs(double{kiri[i]} - double{ref[i]});
    if (d > diff) diff = d, worst = i;
  }
  EXPECT_GT(scale, 1.0) << what << ": logits this small compare nothing";
  EXPECT_LE(diff, 1e-5 * scale) << what << ": logit " << worst % kVocab << " at position "
                                << worst / kVocab << ": kiri " << kiri[worst] << ", transformers "
                                << ref[worst] << " (relative " << diff / scale << ")";
}

// kiri sample's greedy continuation of the prompt and its logits (into `logits`).
std::string kiri_greedy(const std::string& ckpt, const std::string& logits) {
  const Result r =
      run_kiri("sample " + ckpt + " --temperature 0 --stop-at-eos --tokens " +
               std::to_string(kNewTokens) + " --prompt '" + kPrompt + "' --logits " + logits);
  EXPECT_EQ(r.code, 0) << r.output;
  const std::string text = r.output.substr(0, r.output.size() - 1);  // sample's newline
  std::string ids;  // each output byte is a token id
  for (size_t i = std::string(kPrompt).size(); i < text.size(); ++i)
    ids += (ids.empty() ? "" : " ") + std::to_string(static_cast<unsigned char>(text[i]));
  return ids + "\n";
}

// kiri train --init-from `folder` at learning rate 0: its step-1 checkpoint holds the folder's
// weights unchanged.
std::string init_from(const std::string& folder, const std::string& run) {
  const Result r = run_kiri("train --init-from " + folder + kTrain +
                            " --set train.steps=1 --set train.lr=0 --set train.min_lr=0"
                            " --set run.dir=" +
                            run);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized the weights from " + folder), std::string::npos) << r.output;
  return run + "/checkpoints/step_00000001";
}

json llama(int kv_heads, bool tied) {
  return {{"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", kv_heads},
          {"vocab_size", kVocab},
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"bos_token_id", 256},
          {"eos_token_id", 256},
          {"tie_word_embeddings", tied}};
}

// Theta 500000, head width 16: wavelengths 6.3, 33, 170, ... against 64 / 4 and 64 / 1: one
// frequency kept, one smoothed, the others divided by 8.
json llama3(json c) {
  c["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 8.0},           {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  return c;
}

struct Saved {
  const char* name;
  const char* arch;
  json config;
  const char* dtype;
  const char* shard;
};

class HfTransformers : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kiri::testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  std::string dir_;
};

// transformers 5 saves; kiri --init-from reads, and kiri's logits and greedy tokens are
// transformers'. Before the fix the llama3 folder (rope_parameters only) loaded as theta 10000
// without scaling: logits 0.1 to 0.5 of the largest apart.
TEST_F(HfTransformers, FoldersTransformersSavesLoadInKiri) {
  PYTHON_OR_SKIP(py, "");
  const json gpt2 = {{"n_layer", 2},       {"n_head", 2},          {"n_embd", 64},
                     {"n_positions", 64},  {"vocab_size", kVocab}, {"bos_token_id", 256},
                     {"eos_token_id", 256}};
  const std::vector<Saved> cases = {
      {"gpt2", "gpt2", gpt2, "float32", "5GB"},
      {"llama_mha_untied_sharded", "llama", llama(4, false), "float32", "50KB"},
      {"llama_gqa_tied_bf16", "llama", llama(2, true), "bfloat16", "5GB"},
      {"llama_mqa_llama3_sharded", "llama", llama3(llama(1, false)), "float32", "50KB"}};
  json ops = json::array();
  for (const Saved& c : cases) {
    const std::string f = dir_ + "/" + c.name;
    ops.push_back({{"op", "save"},
                   {"arch", c.arch},
                   {"config", c.config},
                   {"seed", 7},
                   {"dtype", c.dtype},
                   {"max_shard_size", c.shard},
                   {"out", f}});
    ops.push_back({{"op", "logits"}, {"folder", f}, {"ids", kPromptIds}, {"out", f + ".logits"}});
    ops.push_back({{"op", "generate"},
                   {"folder", f},
                   {"ids", kPromptIds},
                   {"tokens", kNewTokens},
                   {"out", f + ".greedy"}});
  }
  run_python(py, ops);
  for (const Saved& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string f = dir_ + "/" + c.name;
    const json saved = read_json(f + "/config.json");
    EXPECT_EQ(saved["transformers_version"].get<std::string>().substr(0, 2), "5.");
    EXPECT_EQ(fs::exists(f + "/model.safetensors.index.json"), std::string(c.shard) == "50KB");
    if (c.config.contains("rope_parameters")) {  // transformers 5's only spelling
      EXPECT_FALSE(saved.contains("rope_scaling"));
      EXPECT_FALSE(saved.contains("rope_theta"));
    }
    const std::string ckpt = init_from(f, dir_ + "/run_" + c.name);
    const std::string greedy = kiri_greedy(ckpt, f + ".kiri.logits");
    expect_same_logits(read_floats(f + ".kiri.logits"), read_floats(f + ".logits"), c.name);
    EXPECT_EQ(greedy, read_text(f + ".greedy"));
    // kiri sample reads transformers' folder itself (it holds no tokenizer files).
    EXPECT_EQ(kiri_greedy(f + " --tokenizer byte", f + ".folder.logits"), read_text(f + ".greedy"));
    expect_same_logits(read_floats(f + ".folder.logits"), read_floats(f + ".logits"), c.name);
  }
}

struct Trained {
  const char* name;
  const char* sets;
  const char* shard;
  const char* dtype = "fp32";  // kiri export --dtype
};

const char* kLlamaSets =
    " --set model.arch=llama --set model.n_layer=2 --set model.n_head=4 --set model.n_embd=64"
    " --set model.intermediate_size=96 --set model.block_size=64";
const char* kGpt2Sets =
    " --set model.n_layer=2 --set model.n_head=2 --set model.n_embd=64 --set model.block_size=64";
const char* kLlama3Sets =
    " --set model.num_key_value_heads=1 --set model.tie_word_embeddings=false"
    " --set model.rope_theta=500000 --set model.rope_scaling.rope_type=llama3"
    " --set model.rope_scaling.factor=8 --set model.rope_scaling.low_freq_factor=1"
    " --set model.rope_scaling.high_freq_factor=4"
    " --set model.rope_scaling.original_max_position_embeddings=64";

// kiri trains and exports each case; transformers (`py`: 5.x or 4.46) loads the export with
// kiri's logits and greedy tokens (a bf16 export against kiri's run from that same export);
// transformers saves it again in its own spelling (5: rope_parameters only; 4: rope_theta and
// rope_scaling), and kiri reads that as the same model.
void exports_round_trip(const std::string& dir, const std::string& py,
                        const std::vector<Trained>& cases, char major) {
  json ops = json::array();
  for (const Trained& c : cases) {
    const std::string name = c.name, f = dir + "/" + name;
    const std::string sets =
        name.rfind("gpt2", 0) == 0 ? kGpt2Sets : kLlamaSets + std::string(c.sets);
    Result r = run_kiri("train" + sets + kTrain +
                        " --set train.steps=3 --set train.lr=1e-2 --set run.dir=" + f + "_run");
    ASSERT_EQ(r.code, 0) << r.output;
    r = run_kiri("export " + f + "_run/checkpoints --out " + f + " --max-shard-size " + c.shard +
                 " --dtype " + c.dtype);
    ASSERT_EQ(r.code, 0) << r.output;
    ops.push_back({{"op", "logits"}, {"folder", f}, {"ids", kPromptIds}, {"out", f + ".logits"}});
    ops.push_back({{"op", "generate"},
                   {"folder", f},
                   {"ids", kPromptIds},
                   {"tokens", kNewTokens},
                   {"out", f + ".greedy"}});
    ops.push_back({{"op", "resave"}, {"folder", f}, {"out", f + "_resaved"}});
  }
  run_python(py, ops);
  for (const Trained& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string name = c.name, f = dir + "/" + name;
    // A bf16 export holds rounded weights: kiri's side is the export read back.
    const std::string mine = std::string(c.dtype) == "fp32" ? f + "_run/checkpoints/step_00000003"
                                                            : init_from(f, f + "_mine");
    const std::string greedy = kiri_greedy(mine, f + ".kiri.logits");
    const std::vector<float> kiri = read_floats(f + ".kiri.logits");
    expect_same_logits(kiri, read_floats(f + ".logits"), name + " in transformers");
    EXPECT_EQ(greedy, read_text(f + ".greedy"));
    const json resaved = read_json(f + "_resaved/config.json");
    EXPECT_EQ(resaved["transformers_version"].get<std::string>()[0], major) << resaved.dump();
    if (name == "llama_mqa_llama3_sharded") {
      const json& rope = major == '5' ? resaved["rope_parameters"] : resaved["rope_scaling"];
      EXPECT_EQ(rope["rope_type"], "llama3") << resaved.dump();
      EXPECT_EQ(major == '5' ? rope["rope_theta"] : resaved["rope_theta"], 500000.0)
          << resaved.dump();
      EXPECT_EQ(resaved.contains("rope_scaling"), major == '4') << resaved.dump();
    }
    // transformers' own save of kiri's export, back in kiri: the same model.
    const std::string back = init_from(f + "_resaved", f + "_back");
    EXPECT_EQ(kiri_greedy(back, f + ".back.logits"), greedy);
    expect_same_logits(read_floats(f + ".back.logits"), kiri, name + " saved again");
  }
}

// transformers 5.23. Before the fix the llama3 export, saved again by transformers 5
// (rope_parameters only), came back to kiri without its scaling and theta.
TEST_F(HfTransformers, KiriExportsLoadInTransformersAndComeBack) {
  PYTHON_OR_SKIP(py, "");
  exports_round_trip(
      dir_, py,
      {{"gpt2", "", "5GB"},
       {"llama_gqa_tied", " --set model.num_key_value_heads=2 --set model.tie_word_embeddings=true",
        "5GB"},
       {"llama_gqa_untied_bf16",
        " --set model.num_key_value_heads=2 --set model.tie_word_embeddings=false", "5GB", "bf16"},
       {"llama_mqa_llama3_sharded", kLlama3Sets, "50KB"}},
      '5');
}

// The same folders in transformers 4.46, the last 4.4x: kiri writes both spellings of every
// key the two versions name differently (rope_theta + rope_scaling and rope_parameters,
// torch_dtype and dtype), and each version reads the model kiri trained.
TEST_F(HfTransformers, KiriExportsLoadInTransformers4AndComeBack) {
  PYTHON_OR_SKIP(py, "--transformers4");
  exports_round_trip(
      dir_, py,
      {{"gpt2", "", "5GB"},
       {"llama_gqa_untied_bf16",
        " --set model.num_key_value_heads=2 --set model.tie_word_embeddings=false", "5GB", "bf16"},
       {"llama_mqa_llama3_sharded", kLlama3Sets, "50KB"}},
      '4');
}

}  // namespace
