// A Llama folder's config.json (llama_adapter.h): what kiri writes reads back as the same
// model, LlamaConfig's defaults fill what is absent, and what kiri cannot build is a
// kCheckpoint error naming the file, the key and its value.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "kiri/base/atomic_file.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "temp_dir.h"

namespace kiri::ckpt::hf {
namespace {

using kiri::testing::error_of;
using kiri::testing::temp_dir;

namespace fs = std::filesystem;
using nlohmann::json;

kiri::GPTConfig llama() {
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
  m.rope_scaling.low_freq_factor = 2;
  m.rope_scaling.high_freq_factor = 8;
  m.rope_scaling.original_max_position_embeddings = 64;
  m.tie_word_embeddings = true;
  return m;
}

HfConfig read(const std::string& dir, const json& c) {
  write_file_atomic(dir + "/config.json", c.dump());
  return read_hf_config(dir);
}

TEST(HfLlamaConfig, WhatKiriWritesReadsBackAsTheSameModel) {
  const std::string dir = temp_dir("roundtrip");
  for (const bool tied : {true, false}) {
    kiri::GPTConfig m = llama();
    m.tie_word_embeddings = tied;
    const HfConfig back = read(dir, hf_config_json(m, 256, DType::kF32, "byte"));
    const kiri::GPTConfig& r = back.model;
    EXPECT_TRUE(r.llama());
    EXPECT_EQ(r.n_layer, 3);
    EXPECT_EQ(r.n_head, 8);
    EXPECT_EQ(r.num_key_value_heads, 2);
    EXPECT_EQ(r.n_embd, 64);
    EXPECT_EQ(r.intermediate_size, 160);
    EXPECT_EQ(r.vocab_size, 300);
    EXPECT_EQ(r.block_size, 128);
    EXPECT_EQ(r.rms_norm_eps, 1e-5);
    EXPECT_EQ(r.rope_theta, 500000);
    EXPECT_EQ(r.rope_scaling.type, kiri::RopeScaling::Type::kLlama3);
    EXPECT_EQ(r.rope_scaling.factor, 32);
    EXPECT_EQ(r.rope_scaling.low_freq_factor, 2);
    EXPECT_EQ(r.rope_scaling.high_freq_factor, 8);
    EXPECT_EQ(r.rope_scaling.original_max_position_embeddings, 64);
    EXPECT_EQ(r.tie_word_embeddings, tied);
    EXPECT_EQ(back.tokenizer, "byte");
    EXPECT_TRUE(back.notes.empty());
  }
  fs::remove_all(dir);
}

// A minimal LlamaConfig: the shape keys only; the rest are transformers' defaults (MHA,
// eps 1e-6, theta 10000, no scaling, an untied head). "type" is rope_type's older name.
TEST(HfLlamaConfig, AbsentKeysTakeLlamaConfigsDefaults) {
  const std::string dir = temp_dir("defaults");
  const json c = {{"model_type", "llama"},        {"hidden_size", 32},
                  {"intermediate_size", 48},      {"num_hidden_layers", 2},
                  {"num_attention_heads", 4},     {"vocab_size", 257},
                  {"max_position_embeddings", 64}};
  const kiri::GPTConfig m = read(dir, c).model;
  EXPECT_EQ(m.num_key_value_heads, 4);
  EXPECT_EQ(m.rms_norm_eps, 1e-6);
  EXPECT_EQ(m.rope_theta, 10000);
  EXPECT_EQ(m.rope_scaling.type, kiri::RopeScaling::Type::kNone);
  EXPECT_FALSE(m.tie_word_embeddings);
  json old = c;
  old["rope_scaling"] = {{"type", "llama3"},
                         {"factor", 8},
                         {"low_freq_factor", 1},
                         {"high_freq_factor", 4},
                         {"original_max_position_embeddings", 32}};
  EXPECT_EQ(read(dir, old).model.rope_scaling.type, kiri::RopeScaling::Type::kLlama3);
  old["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(read(dir, old).model.rope_scaling.type, kiri::RopeScaling::Type::kNone);
  old = c;
  old.erase("model_type");  // architectures alone say Llama
  old["architectures"] = {"LlamaForCausalLM"};
  EXPECT_TRUE(read(dir, old).model.llama());
  old["attention_dropout"] = 0.1;
  const HfConfig noted = read(dir, old);
  ASSERT_EQ(noted.notes.size(), 1u);
  EXPECT_NE(noted.notes[0].find("attention_dropout = 0.1 ignored"), std::string::npos);
  fs::remove_all(dir);
}

TEST(HfLlamaConfig, WhatKiriCannotBuildIsNamed) {
  const std::string dir = temp_dir("refused");
  const json base = hf_config_json(llama(), 256, DType::kF32, "byte");
  const std::vector<std::pair<std::string, json>> bad = {
      {"attention_bias", true},
      {"mlp_bias", true},
      {"hidden_act", "gelu"},
      {"head_dim", 16},
      {"architectures", {"MistralForCausalLM"}},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}}}};
  for (const auto& [key, value] : bad) {
    json c = base;
    c[key] = value;
    ErrorKind kind{};
    const std::string e = error_of([&] { read(dir, c); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << key;
    EXPECT_NE(e.find(dir + "/config.json"), std::string::npos) << e;
    const std::string shown =
        key == "rope_scaling" ? "rope_scaling.rope_type = \"yarn\"" : key + " = " + value.dump();
    EXPECT_NE(e.find(shown + " is not supported"), std::string::npos) << e;
  }
  const auto expect = [&](const json& c, const std::string& needle) {
    ErrorKind kind{};
    const std::string e = error_of([&] { read(dir, c); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << c.dump();
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  json c = base;
  c.erase("hidden_size");
  expect(c, "has no 'hidden_size'");
  c = base;
  c["num_key_value_heads"] = 3;  // does not divide 8 query heads
  expect(c, "num_key_value_heads = 3 must divide");
  c = base;
  c["num_attention_heads"] = 0;
  expect(c, "'num_attention_heads' must be an integer in [1, ");
  c = base;
  c["rope_scaling"].erase("factor");
  expect(c, "has no 'rope_scaling.factor'");
  c = base;
  c["rope_theta"] = "big";
  expect(c, "'rope_theta' must be a number, got \"big\"");
  c = base;
  c["tie_word_embeddings"] = 1;
  expect(c, "'tie_word_embeddings' must be true or false, got 1");
  fs::remove_all(dir);
}

// transformers 5 writes the rotary embedding only as rope_parameters (read before the fix as
// theta 10000 without scaling, silently); "type" is rope_type's older name, and a llama3
// dict without original_max_position_embeddings takes max_position_embeddings, as
// transformers 5 does.
TEST(HfLlamaConfig, Transformers5RopeParametersAreRead) {
  const std::string dir = temp_dir("rope5");
  json c = {{"model_type", "llama"},
            {"hidden_size", 32},
            {"intermediate_size", 48},
            {"num_hidden_layers", 2},
            {"num_attention_heads", 4},
            {"vocab_size", 257},
            {"max_position_embeddings", 64},
            {"transformers_version", "5.23.0"},
            {"dtype", "float32"}};
  c["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 16.0},          {"low_freq_factor", 2.0},
                          {"high_freq_factor", 8.0}, {"original_max_position_embeddings", 32}};
  kiri::GPTConfig m = read(dir, c).model;
  EXPECT_EQ(m.rope_theta, 500000);
  EXPECT_EQ(m.rope_scaling.type, kiri::RopeScaling::Type::kLlama3);
  EXPECT_EQ(m.rope_scaling.factor, 16);
  EXPECT_EQ(m.rope_scaling.low_freq_factor, 2);
  EXPECT_EQ(m.rope_scaling.high_freq_factor, 8);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 32);
  c["rope_parameters"].erase("original_max_position_embeddings");
  c["rope_parameters"]["type"] = c["rope_parameters"]["rope_type"];
  c["rope_parameters"].erase("rope_type");
  m = read(dir, c).model;
  EXPECT_EQ(m.rope_scaling.type, kiri::RopeScaling::Type::kLlama3);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 64);
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  m = read(dir, c).model;
  EXPECT_EQ(m.rope_theta, 250000);
  EXPECT_EQ(m.rope_scaling.type, kiri::RopeScaling::Type::kNone);
  // Both spellings, agreeing (what kiri writes): read; disagreeing: named.
  c["rope_theta"] = 250000.0;
  EXPECT_EQ(read(dir, c).model.rope_theta, 250000);
  c["rope_theta"] = 10000.0;
  std::string e = error_of([&] { read(dir, c); });
  EXPECT_NE(e.find("config.json: rope_parameters = {\"rope_theta\":250000.0,\"rope_type\":"
                   "\"default\"} contradicts rope_theta = 10000 and rope_scaling = null "
                   "(transformers 4 reads those, transformers 5 rope_parameters"),
            std::string::npos)
      << e;
  // What kiri writes, read back with its scaling after only the rope_parameters survive.
  json written = hf_config_json(llama(), 256, DType::kF32, "byte");
  written.erase("rope_theta");
  written.erase("rope_scaling");
  written.erase("torch_dtype");
  m = read(dir, written).model;
  EXPECT_EQ(m.rope_theta, 500000);
  EXPECT_EQ(m.rope_scaling.factor, 32);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 64);
  fs::remove_all(dir);
}

// Each rope type kiri has no rotary embedding for, in all four spellings, is named (a yarn
// under rope_parameters loaded with exit 0 before the fix); so are a type's keys kiri cannot
// honour.
TEST(HfLlamaConfig, EveryRopeTypeKiriCannotBuildIsRefusedByName) {
  const std::string dir = temp_dir("ropetypes");
  json base = hf_config_json(llama(), 256, DType::kF32, "byte");
  base.erase("rope_scaling");
  base.erase("rope_theta");
  for (const char* dict : {"rope_parameters", "rope_scaling"})
    for (const char* key : {"rope_type", "type"})
      for (const char* type : {"linear", "dynamic", "yarn", "longrope", "ntk"}) {
        json c = base;
        c.erase("rope_parameters");
        c[dict] = {{key, type}, {"factor", 4.0}, {"rope_theta", 500000.0}};
        ErrorKind kind{};
        const std::string e = error_of([&] { read(dir, c); }, &kind);
        EXPECT_EQ(kind, ErrorKind::kCheckpoint) << e;
        EXPECT_NE(e.find(str(dir, "/config.json: ", dict, ".", key, " = \"", type,
                             "\" is not supported: kiri's rotary embedding scales as Llama 3")),
                  std::string::npos)
            << e;
      }
  json c = base;
  c["rope_parameters"]["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of([&] {
              read(dir, c);
            }).find("rope_parameters.partial_rotary_factor = 0.5 is not supported"),
            std::string::npos);
  c = base;
  c["rope_parameters"]["attention_factor"] = 2.0;
  EXPECT_NE(error_of([&] {
              read(dir, c);
            }).find("rope_parameters.attention_factor = 2.0 is not supported: kiri's llama3"),
            std::string::npos);
  fs::remove_all(dir);
}

// A key kiri does not read is named, bookkeeping is accepted, dtypes are checked, and the
// "kiri" block is what kiri writes or named.
TEST(HfLlamaConfig, KeysKiriDoesNotReadAreNamedUnlessBookkeeping) {
  const std::string dir = temp_dir("keys");
  json base = hf_config_json(llama(), 256, DType::kF32, "byte");
  json c = base;
  const json bookkeeping = {
      {"transformers_version", "4.46.0"}, {"_name_or_path", "meta-llama/x"},
      {"pad_token_id", nullptr},          {"eos_token_id", {128001, 128009}},
      {"is_encoder_decoder", false},      {"task_specific_params", {{"x", 1}}}};
  for (const auto& [k, v] : bookkeeping.items()) c[k] = v;
  EXPECT_EQ(read(dir, c).model.n_layer, 3);
  const auto expect = [&](const std::string& key, const json& value, const std::string& needle) {
    json bad = base;
    bad[key] = value;
    ErrorKind kind{};
    const std::string e = error_of([&] { read(dir, bad); }, &kind);
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << key;
    EXPECT_NE(e.find(dir + "/config.json: " + needle), std::string::npos) << e;
  };
  expect("sliding_window", 16, "sliding_window = 16 is not supported: kiri does not know this key");
  expect("quantization_config", {{"quant_method", "bitsandbytes"}},
         "quantization_config = {\"quant_method\":\"bitsandbytes\"} is not supported");
  expect("is_encoder_decoder", true,
         "is_encoder_decoder = true is not supported: kiri's models hold only the default, false");
  expect("dtype", "int8", "dtype = \"int8\" is not supported: kiri reads float32, bfloat16");
  expect("dtype", "bfloat16",
         "torch_dtype = \"float32\" contradicts dtype = \"bfloat16\": transformers 4 reads");
  expect("kiri", "byte", "'kiri' must be an object, got \"byte\"");
  expect("kiri", {{"format_version", 1}, {"tokenizer", 7}},
         "kiri.tokenizer = 7 is not a tokenizer: \"byte\", \"gpt2\" or the path");
  expect("kiri", {{"format_version", 2}, {"tokenizer", "byte"}},
         "kiri.format_version = 2 is not supported");
  expect("kiri", {{"format_version", 1}, {"tokenizr", "byte"}},
         "kiri.tokenizr = \"byte\" is not a key kiri writes");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::ckpt::hf
