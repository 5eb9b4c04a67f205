// Hugging Face model folders (hf_model.h): the shard cut, the names and dtypes of HF's own
// GPT-2 files, config.json's refusals, and --init-from on every layout against one process.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "kiri/base/atomic_file.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/comm/local/local.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

using namespace kiri::ckpt::hf;  // the HF model folders (ckpt/hf/)

using kiri::testing::error_of;
using kiri::testing::temp_dir;

namespace fs = std::filesystem;
using nlohmann::json;

// The model of these tests: GPT-2, or a Llama of 4 query heads over 2 key/value heads.
enum class Model { kGpt2, kLlama, kLlamaTied };

RunConfig small(int64_t micro_batch = 4, Model m = Model::kGpt2) {
  RunConfig c = equivalence_config(2, 2, 32, micro_batch);
  c.model.vocab_size = 257;  // the byte tokenizer's
  c.train.steps = 2;
  if (m != Model::kGpt2) make_llama(c, 32, 4, 2, 48, m == Model::kLlamaTied);
  return c;
}

// A model trained 2 steps, as a kiri checkpoint under dir/ckpt; its whole weights in *model.
std::string trained_checkpoint(const std::string& dir,
                               std::vector<std::pair<std::string, Tensor>>* model = nullptr,
                               Model m = Model::kGpt2) {
  RunConfig c = small(4, m);
  c.checkpoint.dir = dir + "/ckpt";
  Trainer t(c);
  t.train_step();
  t.train_step();
  const std::string ck = t.save_checkpoint();
  if (model) *model = t.gather_model();
  return ck;
}

TEST(HfModel, ShardSizesReadAsTransformersReadsThem) {
  EXPECT_EQ(parse_max_shard_size("5GB", "k"), 5'000'000'000);
  EXPECT_EQ(parse_max_shard_size("2GiB", "k"), int64_t{2} << 30);
  EXPECT_EQ(parse_max_shard_size("100KB", "k"), 100'000);
  EXPECT_EQ(parse_max_shard_size("4096", "k"), 4096);
  ErrorKind kind{};
  EXPECT_NE(error_of([] { parse_max_shard_size("0", "checkpoint.max_shard_size"); }, &kind)
                .find("checkpoint.max_shard_size must be a positive size"),
            std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_NE(error_of([] { parse_max_shard_size("lots", "k"); }, &kind).find("'lots'"),
            std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kConfig);
}

TEST(HfModel, ShardsAreCutInOrderAndReadBackInAnyDtype) {
  const std::string dir = temp_dir("shards");
  Allocator alloc;
  std::vector<ckpt::NamedTensor> ts;
  for (int i = 0; i < 5; ++i) {  // 400, 400, 800, 400, 2000 bytes
    const int64_t n = i == 2 ? 200 : i == 4 ? 500 : 100;
    Tensor t = Tensor::empty({n}, DType::kF32, Category::kBuffers, alloc);
    for (int64_t k = 0; k < n; ++k) t.data<float>()[k] = 0.001f * float(k) + float(i);
    ts.push_back({"transformer.t" + std::to_string(i), t});
  }
  // 1000-byte shards: {t0, t1}, {t2}, {t3}, {t4} (t2 does not fit beside t0, t1; t4 alone
  // overflows a shard and gets its own).
  const auto files = write_hf_weights(dir, ts, DType::kBF16, 1000 / 2);
  ASSERT_EQ(files.size(), 5u);
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  std::ifstream f(dir + "/model.safetensors.index.json");
  const json index = json::parse(f);
  EXPECT_EQ(index["metadata"]["total_size"], 2000);  // in bf16
  EXPECT_EQ(index["weight_map"]["transformer.t0"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["transformer.t1"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["transformer.t2"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["transformer.t3"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["transformer.t4"], "model-00004-of-00004.safetensors");
  HfWeights w = HfWeights::open(dir);
  w.check_names(
      {"transformer.t0", "transformer.t1", "transformer.t2", "transformer.t3", "transformer.t4"});
  for (const auto& t : ts) {
    Tensor back = Tensor::empty(t.tensor.shape(), DType::kF32, Category::kBuffers, alloc);
    w.read(t.name, back);
    for (int64_t k = 0; k < back.numel(); ++k)  // bf16: 8 significant bits
      EXPECT_NEAR(back.item(k), t.tensor.item(k), std::fabs(t.tensor.item(k)) / 256) << t.name;
  }
  EXPECT_NE(error_of([&] { w.check_names({"transformer.t0"}); }).find("'transformer.t1'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              w.check_names({"transformer.t0", "transformer.t1", "transformer.t2", "transformer.t3",
                             "transformer.t4", "transformer.t5"});
            }).find("the model's tensor 'transformer.t5' is missing"),
            std::string::npos);
  fs::remove_all(dir);
}

// HF's own gpt2 files: no `transformer.` prefix, the attention-mask buffers, lm_head.weight
// present, fp16 on disk.
TEST(HfModel, InitFromReadsHfGpt2NamesBuffersAndATiedHead) {
  const std::string dir = temp_dir("hfnames");
  std::vector<std::pair<std::string, Tensor>> model;
  trained_checkpoint(dir, &model);
  RunConfig c = small();
  const std::string hf = dir + "/hf";
  fs::create_directories(hf);
  Allocator alloc;
  std::vector<ckpt::NamedTensor> ts;
  for (auto& [name, t] : model) {
    ts.push_back({name.substr(std::string("transformer.").size()), t});
    if (name == "transformer.wte.weight") ts.push_back({"lm_head.weight", t});
  }
  for (int i = 0; i < c.model.n_layer; ++i)
    for (const char* b : {".attn.bias", ".attn.masked_bias"})
      ts.push_back({"h." + std::to_string(i) + b,
                    Tensor::zeros({1, 1, 32, 32}, DType::kF32, Category::kBuffers, alloc)});
  write_hf_weights(hf, ts, DType::kF16, int64_t{1} << 30);
  write_file_atomic(hf + "/config.json", hf_config_json(c.model, -1, DType::kF16, "byte").dump());
  Trainer from_kiri(c), from_hf(c);
  from_kiri.init_from(dir + "/ckpt");
  from_hf.init_from(hf);
  EXPECT_EQ(from_hf.step(), 0);
  EXPECT_EQ(from_hf.optimizer().step_count(), 0);
  // fp16 weights (11 significant bits) give nearly the loss of the fp32 ones.
  const double a = from_kiri.evaluate(2), b = from_hf.evaluate(2);
  EXPECT_NEAR(a, b, 1e-3 * a);
  EXPECT_NE(a, b);

  // An untied head is refused, naming both tensors.
  for (auto& t : ts)
    if (t.name == "lm_head.weight") {
      Tensor u = Tensor::empty(t.tensor.shape(), DType::kF32, Category::kBuffers, alloc);
      u.copy_from(t.tensor);
      u.data<float>()[5] += 1;
      t.tensor = u;
    }
  write_hf_weights(hf, ts, DType::kF32, int64_t{1} << 30);
  Trainer untied(c);
  ErrorKind kind{};
  const std::string e = error_of([&] { untied.init_from(hf); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kCheckpoint) << e;
  EXPECT_NE(e.find("lm_head.weight differs from transformer.wte.weight at element 5"),
            std::string::npos)
      << e;
  // A tensor the model has no place for, and one of another shape.
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& t) { return t.name == "lm_head.weight"; }),
           ts.end());
  ts.push_back({"h.0.attn.q_proj.weight", ts[0].tensor});
  write_hf_weights(hf, ts, DType::kF32, int64_t{1} << 30);
  EXPECT_NE(error_of([&] { untied.init_from(hf); }).find("'h.0.attn.q_proj.weight'"),
            std::string::npos);
  ts.pop_back();
  for (auto& t : ts)
    if (t.name == "wpe.weight") t.tensor = t.tensor.slice(0, 16);
  write_hf_weights(hf, ts, DType::kF32, int64_t{1} << 30);
  const std::string s = error_of([&] { untied.init_from(hf); });
  EXPECT_NE(s.find("tensor 'wpe.weight' has shape [16, 32], the model's transformer.wpe.weight "
                   "is [32, 32]"),
            std::string::npos)
      << s;
  fs::remove_all(dir);
}

TEST(HfModel, ConfigKeysKiriCannotHonourAreNamed) {
  const std::string dir = temp_dir("config");
  const json base = hf_config_json(small().model, 50256, DType::kF32, "byte");
  const HfConfig ok = [&] {
    write_file_atomic(dir + "/config.json", base.dump());
    return read_hf_config(dir);
  }();
  EXPECT_EQ(ok.model.n_layer, 2);
  EXPECT_EQ(ok.model.n_embd, 32);
  EXPECT_EQ(ok.model.block_size, 32);
  EXPECT_EQ(ok.tokenizer, "byte");
  const std::vector<std::pair<std::string, json>> bad = {{"model_type", "bert"},
                                                         {"layer_norm_epsilon", 1e-6},
                                                         {"activation_function", "relu"},
                                                         {"n_inner", 64},
                                                         {"scale_attn_weights", false},
                                                         {"tie_word_embeddings", false},
                                                         {"architectures", {"BertModel"}},
                                                         {"scale_attn_by_inverse_layer_idx", true},
                                                         {"n_special", 2},
                                                         {"add_cross_attention", true}};
  for (const auto& [key, value] : bad) {
    json c = base;
    c[key] = value;
    write_file_atomic(dir + "/config.json", c.dump());
    ErrorKind kind{};
    const std::string e = error_of([&] { read_hf_config(dir); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << key;
    EXPECT_NE(e.find(key + " = " + value.dump() + " is not supported"), std::string::npos) << e;
  }
  json c = base;
  c.erase("n_embd");
  write_file_atomic(dir + "/config.json", c.dump());
  EXPECT_NE(error_of([&] { read_hf_config(dir); }).find("has no 'n_embd'"), std::string::npos);
  c = base;
  c["n_head"] = 3;  // 32 is not a multiple of 3
  write_file_atomic(dir + "/config.json", c.dump());
  EXPECT_NE(error_of([&] { read_hf_config(dir); }).find("n_head"), std::string::npos);
  c = base;  // GPT-2's own: dropout 0.1, which kiri (without dropout) notes and ignores
  c["resid_pdrop"] = 0.1;
  write_file_atomic(dir + "/config.json", c.dump());
  ASSERT_EQ(read_hf_config(dir).notes.size(), 1u);
  EXPECT_NE(read_hf_config(dir).notes[0].find("resid_pdrop = 0.1 ignored"), std::string::npos);
  fs::remove_all(dir);
}

// A Llama's config.json is LlamaConfig's, key for key (model.* keys map one to one).
TEST(HfModel, LlamaConfigJsonHasLlamaConfigsKeys) {
  kiri::GPTConfig m;
  m.arch = kiri::Arch::kLlama;
  m.n_layer = 3;
  m.n_head = 8;
  m.num_key_value_heads = 2;
  m.n_embd = 64;
  m.intermediate_size = 160;
  m.vocab_size = 300;
  m.block_size = 128;
  m.rms_norm_eps = 1e-5;
  m.rope_theta = 500000;
  m.rope_scaling.type = kiri::RopeScaling::Type::kLlama3;
  m.rope_scaling.factor = 32;
  m.tie_word_embeddings = true;
  const json c = hf_config_json(m, 256, DType::kBF16, "byte");
  const json expected = {{"model_type", "llama"},
                         {"architectures", {"LlamaForCausalLM"}},
                         {"num_hidden_layers", 3},
                         {"num_attention_heads", 8},
                         {"num_key_value_heads", 2},
                         {"hidden_size", 64},
                         {"head_dim", 8},
                         {"intermediate_size", 160},
                         {"vocab_size", 300},
                         {"max_position_embeddings", 128},
                         {"rms_norm_eps", 1e-5},
                         {"rope_theta", 500000.0},
                         {"tie_word_embeddings", true},
                         {"hidden_act", "silu"},
                         {"attention_bias", false},
                         {"mlp_bias", false},
                         {"torch_dtype", "bfloat16"},
                         {"bos_token_id", 256},
                         {"eos_token_id", 256}};
  for (const auto& [key, value] : expected.items()) EXPECT_EQ(c[key], value) << key;
  EXPECT_EQ(c["rope_scaling"], json({{"rope_type", "llama3"},
                                     {"factor", 32.0},
                                     {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0},
                                     {"original_max_position_embeddings", 8192}}));
  // transformers 5's spelling of the same (it reads rope_scaling first when not null).
  EXPECT_EQ(c["rope_parameters"], json({{"rope_type", "llama3"},
                                        {"rope_theta", 500000.0},
                                        {"factor", 32.0},
                                        {"low_freq_factor", 1.0},
                                        {"high_freq_factor", 4.0},
                                        {"original_max_position_embeddings", 8192}}));
  EXPECT_EQ(c["torch_dtype"], "bfloat16");  // which transformers 4 and 5 both read
  EXPECT_FALSE(c.contains("dtype"));
  EXPECT_FALSE(c.contains("n_layer"));  // nothing of GPT2Config's
  m.rope_scaling.type = kiri::RopeScaling::Type::kNone;
  const json plain = hf_config_json(m, 256, DType::kF32, "byte");
  EXPECT_EQ(plain["rope_scaling"], nullptr);
  EXPECT_EQ(plain["rope_parameters"], json({{"rope_type", "default"}, {"rope_theta", 500000.0}}));
  EXPECT_EQ(hf_config_json(small().model, 256, DType::kF16, "byte")["torch_dtype"], "float16");
}

// --init-from on dp 2 ZeRO-3, tp 2 and pp 2: the first step's loss (the loaded weights' loss
// on the first global batch) equals one process's within 1e-6 relative. GPT-2, and a Llama's
// folder (LlamaForCausalLM's names; tied: no lm_head.weight, the last pp stage's head read
// from model.embed_tokens.weight).
class HfModelLayouts : public ::testing::TestWithParam<Model> {};

TEST_P(HfModelLayouts, InitFromEveryLayoutEqualsOneProcess) {
  omp_set_num_threads(1);
  const Model m = GetParam();
  const std::string dir = temp_dir("layouts");
  const std::string ck = trained_checkpoint(dir, nullptr, m);
  double one = 0;
  {
    Trainer t(small(4, m));
    t.init_from(ck);
    one = t.train_step().loss;
  }
  struct Layout {
    const char* name;
    int dp, tp, pp, zero;
    int64_t micro_batch;
    int microbatches;
  };
  for (const Layout& l : {Layout{"dp2 zero3", 2, 1, 1, 3, 2, 1}, Layout{"tp2", 1, 2, 1, 0, 4, 1},
                          Layout{"pp2", 1, 1, 2, 0, 2, 2}}) {
    std::mutex mu;
    std::vector<double> losses;
    comm::run_local(2, [&](comm::Communicator& world) {
      RunConfig c = small(l.micro_batch, m);
      c.parallel.dp = l.dp;
      c.parallel.tp = l.tp;
      c.parallel.pp = l.pp;
      c.parallel.zero_stage = l.zero;
      c.parallel.microbatches = l.microbatches;
      Trainer t(c, world);
      t.init_from(dir + "/ckpt");  // the root: its latest
      EXPECT_EQ(t.step(), 0);
      const double loss = t.train_step().loss;
      std::lock_guard<std::mutex> lock(mu);
      losses.push_back(loss);
    });
    ASSERT_EQ(losses.size(), 2u) << l.name;
    for (double loss : losses) EXPECT_NEAR(loss, one, 1e-6 * one) << l.name;
  }
  fs::remove_all(dir);
}

std::string model_name(const ::testing::TestParamInfo<Model>& info) {
  return info.param == Model::kGpt2 ? "gpt2" : info.param == Model::kLlama ? "llama" : "llama_tied";
}
INSTANTIATE_TEST_SUITE_P(HfModel, HfModelLayouts,
                         ::testing::Values(Model::kGpt2, Model::kLlama, Model::kLlamaTied),
                         model_name);

TEST(HfModel, InitFromAFolderOfAnotherShapeNamesTheTensor) {
  const std::string dir = temp_dir("othershape");
  const std::string ck = trained_checkpoint(dir);
  RunConfig c = small();
  c.model.n_layer = 3;
  Trainer t(c);
  const std::string e = error_of([&] { t.init_from(ck); });
  EXPECT_NE(e.find("the model's tensor 'transformer.h.2."), std::string::npos) << e;
  EXPECT_NE(e.find("is missing"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(HfModel, BadIndexesAndFoldersAreNamed) {
  const std::string dir = temp_dir("index");
  Allocator alloc;
  const Tensor t = Tensor::zeros({4}, DType::kF32, Category::kBuffers, alloc);
  ckpt::save_safetensors(dir + "/model-00001-of-00001.safetensors", {{"wte.weight", t}});
  const auto refused = [&](const std::string& index, const std::string& needle) {
    write_file_atomic(dir + "/model.safetensors.index.json", index);
    ErrorKind kind{};
    const std::string e = error_of([&] { HfWeights::open(dir); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << index;
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  refused(R"({"metadata": {}})", "has no 'weight_map' object");
  refused(R"({"weight_map": []})", "has no 'weight_map' object");
  refused(R"({"weight_map": {"wte.weight": "../model-00001-of-00001.safetensors"}})",
          "maps to \"../model-00001-of-00001.safetensors\", not a file name");
  refused(R"({"weight_map": {"wte.weight": 7}})", "maps to 7, not a file name");
  refused(R"({"weight_map": {"wte.weight": "model-00002-of-00002.safetensors"}})",
          "names model-00002-of-00002.safetensors (for tensor wte.weight) but the file is missing");
  refused("{\"weight_map\": " + std::string(40, '[') + std::string(40, ']') + "}",
          "nests deeper than 16 levels");
  refused("not json", "is not valid JSON");
  // One tensor under both of its names.
  ckpt::save_safetensors(dir + "/model-00001-of-00001.safetensors",
                         {{"wte.weight", t}, {"transformer.wte.weight", t}});
  refused(R"({"weight_map": {"wte.weight": "model-00001-of-00001.safetensors",
                             "transformer.wte.weight": "model-00001-of-00001.safetensors"}})",
          "one tensor under two names");
  // Both forms: transformers loads model.safetensors (modeling_utils' order), kiri loaded the
  // shards before the fix; now named.
  write_file_atomic(dir + "/model.safetensors.index.json",
                    R"({"weight_map": {"wte.weight": "model-00001-of-00001.safetensors"}})");
  ckpt::save_safetensors(dir + "/model.safetensors", {{"wte.weight", t}});
  refused(R"({"weight_map": {"wte.weight": "model-00001-of-00001.safetensors"}})",
          dir +
              " holds both model.safetensors and model.safetensors.index.json: transformers "
              "loads the first and ignores the shards");
  fs::remove(dir + "/model.safetensors");
  fs::remove(dir + "/model.safetensors.index.json");
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { HfWeights::open(dir); }, &kind)
                .find("holds neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kCheckpoint);
  fs::remove_all(dir);
}

TEST(HfModel, AFoldersTokenizerIsItsKiriBlocksOrItsOwnFiles) {
  const std::string dir = temp_dir("tokenizer");
  HfConfig c;
  EXPECT_EQ(model_folder_tokenizer(dir, c), "");  // no files: the run's data.tokenizer
  c.tokenizer = "byte";
  EXPECT_EQ(model_folder_tokenizer(dir, c), "byte");
  c.tokenizer = "some/path/of/another/machine";
  write_file_atomic(dir + "/vocab.json", "{}");
  // merges.txt missing, the path is not here: named (the run's data.tokenizer before the fix,
  // and the error then blamed the vocabulary's size).
  ErrorKind kind{};
  EXPECT_NE(error_of([&] { model_folder_tokenizer(dir, c); }, &kind)
                .find("/config.json: kiri.tokenizer = \"some/path/of/another/machine\" is neither "
                      "\"byte\" nor \"gpt2\" nor an existing path, and the folder holds no "
                      "tokenizer files"),
            std::string::npos);
  EXPECT_EQ(kind, ErrorKind::kCheckpoint);
  c.tokenizer = dir + "/vocab.json";  // a path that is here
  EXPECT_EQ(model_folder_tokenizer(dir, c), dir + "/vocab.json");
  c.tokenizer = "some/path/of/another/machine";
  write_file_atomic(dir + "/merges.txt", "");
  EXPECT_EQ(model_folder_tokenizer(dir, c), dir);
  fs::remove_all(dir);
}

// A checkpoint cut into shards (checkpoint.max_shard_size) resumes across layouts like a
// whole one: dp 2 ZeRO-3 -> one process -> dp 2 ZeRO-3, the losses continuing.
TEST(HfModel, ShardedCheckpointsResumeAcrossLayouts) {
  omp_set_num_threads(1);
  const std::string root = temp_dir("sharded_resume");
  comm::run_local(2, [&](comm::Communicator& world) {
    RunConfig parallel = small(2), single = small(4);
    parallel.parallel.dp = 2;
    parallel.parallel.zero_stage = 3;
    parallel.train.steps = single.train.steps = 6;
    parallel.checkpoint.max_shard_size = single.checkpoint.max_shard_size = "20KB";
    checkpoint_round_trip(world, parallel, single, root, 2, 2, 2);
  });
  EXPECT_FALSE(fs::exists(root));  // removed by the round trip when it completed
}

}  // namespace
}  // namespace kiri::train
