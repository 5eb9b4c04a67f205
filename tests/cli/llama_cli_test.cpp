// model.arch = llama through the binary: configs/llama-tiny.json trains and checkpoints a
// folder whose config.json is a LlamaConfig and whose tensors carry LlamaForCausalLM's
// names; kiri export writes one, which --init-from reads; --auto plans it; the shapes a Llama
// cannot take are named errors.
#include <gtest/gtest.h>

#include <cmath>
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
using nlohmann::json;

const std::string kConfig = std::string(KIRI_SOURCE_DIR) + "/configs/llama-tiny.json";

void expect_error(const std::string& args, int code, const std::string& needle) {
  const Result r = run_kiri(args);
  EXPECT_EQ(r.code, code) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << args << "\n" << r.output;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// The tensor names in a safetensors file's header.
json safetensors_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  return json::parse(text);
}

// The losses of a run's metrics.jsonl, in order.
std::vector<double> losses(const std::string& metrics) {
  std::ifstream f(metrics);
  std::vector<double> out;
  for (std::string line; std::getline(f, line);) out.push_back(json::parse(line)["loss"]);
  return out;
}

TEST(LlamaCli, TrainsCheckpointsAndExportsALlamaFolder) {
  const std::string dir = kiri::testing::temp_dir("folder");
  // The README's run: 20 steps of configs/llama-tiny.json from ln(257) = 5.55 nats a byte.
  Result r = run_kiri("train " + kConfig + " --set train.steps=20 --set train.eval_every=0" +
                      " --set run.dir=" + dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> l = losses(dir + "/run/metrics.jsonl");
  ASSERT_EQ(l.size(), 20u);
  EXPECT_NEAR(l.front(), std::log(257.0), 0.1);
  EXPECT_LT(l.back(), l.front() - 1.0) << "the loss does not fall";
  const std::string step = dir + "/run/checkpoints/step_00000020";
  const json c = read_json(step + "/config.json");
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["architectures"], json({"LlamaForCausalLM"}));
  EXPECT_EQ(c["hidden_size"], 64);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["intermediate_size"], 176);
  EXPECT_EQ(c["max_position_embeddings"], 64);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_EQ(c["hidden_act"], "silu");
  EXPECT_TRUE(c["rope_scaling"].is_null());
  const json h = safetensors_header(step + "/model.safetensors");
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.0.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight"})
    EXPECT_TRUE(h.contains(name)) << name;
  EXPECT_EQ(h["model.layers.1.self_attn.k_proj.weight"]["shape"], json({32, 64}));  // [out, in]

  r = run_kiri("export " + dir + "/run/checkpoints --out " + dir + "/hf --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  const json e = read_json(dir + "/hf/config.json");
  EXPECT_EQ(e["model_type"], "llama");
  EXPECT_EQ(e["torch_dtype"], "bfloat16");
  EXPECT_EQ(safetensors_header(dir + "/hf/model.safetensors")["lm_head.weight"]["dtype"], "BF16");

  // The bf16 folder starts a run (tests/cli/hf_llama_test.cpp compares the logits): the
  // shape and the byte tokenizer come from its config.json; the loss starts where step 20's
  // weights, rounded to bf16, stand.
  r = run_kiri("train --init-from " + dir + "/hf --set train.seq_len=64 --set train.steps=1" +
               " --set train.eval_every=0 --set train.eval_batches=1 --set run.dir=" + dir + "/ft");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized the weights from"), std::string::npos) << r.output;
  EXPECT_LT(losses(dir + "/ft/metrics.jsonl").at(0), l.front() - 1.0) << r.output;
  // The planner takes the Llama's own shape (grouped-query attention, SwiGLU, untied head).
  r = run_kiri("train " + kConfig + " --auto --dry-run --mem-limit 1GiB", "KIRI_CALIBRATION=none");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("auto layout: "), std::string::npos) << r.output;
  fs::remove_all(dir);
}

TEST(LlamaCli, ShapesALlamaCannotTakeAreNamed) {
  const std::string llama = "config " + kConfig;
  expect_error(llama + " --set model.num_key_value_heads=3", 2,
               "model.num_key_value_heads = 3 must divide model.n_head = 4");
  expect_error(llama + " --set parallel.tp=4", 2,
               "parallel.tp = 4 must divide model.num_key_value_heads = 2 (model.n_head = 4)");
  expect_error(llama + " --set parallel.tp=8", 2, "parallel.tp = 8 must divide model.n_head = 4");
  expect_error(llama + " --set model.intermediate_size=175 --set parallel.tp=2", 2,
               "parallel.tp = 2 must divide the MLP width = 175");
  expect_error(
      llama + " --set model.n_embd=72 --set model.n_head=8 --set model.num_key_value_heads=4", 2,
      "model.n_embd / model.n_head = 72 / 8 = 9 must be even");
  expect_error(llama + " --set model.rope_scaling.rope_type=yarn", 2,
               "model.rope_scaling.rope_type must be default | llama3, got 'yarn'");
  expect_error("config --set model.num_key_value_heads=2", 2,
               "model.num_key_value_heads = 2 applies to model.arch = llama");
  expect_error("config --set model.tie_word_embeddings=false", 2,
               "model.tie_word_embeddings = false needs model.arch = llama");
}

}  // namespace
