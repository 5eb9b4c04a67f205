// model.arch = llama: LlamaForCausalLM's names and shapes, its parameter count, and the
// named errors of shapes it cannot take (alone or cut over tensor-parallel ranks).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "kiri/model/gpt.h"

namespace kiri::model {
namespace {

GPTConfig llama(int n_head, int kv_heads, int n_embd) {
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 2;
  c.n_head = n_head;
  c.num_key_value_heads = kv_heads;
  c.n_embd = n_embd;
  c.intermediate_size = 48;
  c.vocab_size = 11;
  c.block_size = 8;
  c.tie_word_embeddings = false;
  return c;
}

TEST(Llama, HuggingFaceNamesAndShapes) {
  const GPTConfig c = llama(4, 2, 16);
  GPT<float> m(c);
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), 1u + 9u * c.n_layer + 2u);
  const std::vector<std::pair<std::string, Shape>> first = {
      {"model.embed_tokens.weight", {11, 16}},
      {"model.layers.0.input_layernorm.weight", {16}},
      {"model.layers.0.self_attn.q_proj.weight", {16, 16}},  // nn.Linear: [out, in]
      {"model.layers.0.self_attn.k_proj.weight", {8, 16}},   // 2 key/value heads of 4
      {"model.layers.0.self_attn.v_proj.weight", {8, 16}},
      {"model.layers.0.self_attn.o_proj.weight", {16, 16}},
      {"model.layers.0.post_attention_layernorm.weight", {16}},
      {"model.layers.0.mlp.gate_proj.weight", {48, 16}},
      {"model.layers.0.mlp.up_proj.weight", {48, 16}},
      {"model.layers.0.mlp.down_proj.weight", {16, 48}}};
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(params[i]->name, first[i].first);
    EXPECT_EQ(params[i]->shape, first[i].second) << first[i].first;
  }
  EXPECT_EQ(params[params.size() - 2]->name, "model.norm.weight");
  EXPECT_EQ(params.back()->name, "lm_head.weight");
  EXPECT_EQ(params.back()->shape, Shape({11, 16}));
  int64_t total = 0;
  for (auto* p : params) {
    total += p->numel();
    // AdamW decays the matrices and the embeddings, not the norms (GPT-2's rule).
    EXPECT_EQ(p->weight_decay, p->shape.rank() == 2) << p->name;
  }
  EXPECT_EQ(total, c.num_parameters());
  // Tied: no lm_head.weight, the embedding is the head.
  GPTConfig tied = c;
  tied.tie_word_embeddings = true;
  GPT<float> t(tied);
  EXPECT_EQ(t.parameters().back()->name, "model.norm.weight");
  EXPECT_EQ(tied.num_parameters(), c.num_parameters() - 11 * 16);
}

// Meta's Llama 3 8B (config.json of meta-llama/Meta-Llama-3-8B): 8,030,261,248 parameters.
TEST(Llama, CountsLlama3_8BsParameters) {
  GPTConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = 32;
  c.n_head = 32;
  c.num_key_value_heads = 8;
  c.n_embd = 4096;
  c.intermediate_size = 14336;
  c.vocab_size = 128256;
  c.block_size = 8192;
  c.tie_word_embeddings = false;
  c.validate();
  EXPECT_EQ(c.num_parameters(), int64_t{8030261248});
}

void expect_config_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LlamaErrors, KeyValueHeadsMustDivideTheQueryHeads) {
  expect_config_error([] { llama(4, 3, 16).validate(); },
                      "model.num_key_value_heads = 3 must divide model.n_head = 4");
}
TEST(LlamaErrors, KeyValueHeadsAtMostTheQueryHeads) {
  expect_config_error([] { llama(4, 8, 16).validate(); },
                      "model.num_key_value_heads = 8 must be in [0, 4]");
}
TEST(LlamaErrors, TheHeadDimensionMustBeEven) {
  expect_config_error([] { llama(4, 2, 12).validate(); },
                      "model.n_embd / model.n_head = 12 / 4 = 3 must be even");
}
TEST(LlamaErrors, TensorParallelMustDivideTheQueryHeads) {
  expect_config_error([] { llama(6, 6, 24).validate_tensor_parallel(4); },
                      "parallel.tp = 4 must divide model.n_head = 6");
}
TEST(LlamaErrors, TensorParallelMustDivideTheKeyValueHeadsNamingBoth) {
  expect_config_error(
      [] { llama(8, 2, 32).validate_tensor_parallel(4); },
      "parallel.tp = 4 must divide model.num_key_value_heads = 2 (model.n_head = 8)");
}
TEST(LlamaErrors, TensorParallelMustDivideTheMlp) {
  GPTConfig c = llama(4, 4, 16);
  c.intermediate_size = 50;
  expect_config_error([&] { c.validate_tensor_parallel(4); },
                      "parallel.tp = 4 must divide the MLP width = 50");
}
TEST(LlamaErrors, Llama3ScalingNeedsLowBelowHighFrequency) {
  GPTConfig c = llama(4, 2, 16);
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.low_freq_factor = 4;
  c.rope_scaling.high_freq_factor = 1;
  expect_config_error([&] { c.validate(); },
                      "model.rope_scaling.low_freq_factor = 4 must be > 0 and below "
                      "model.rope_scaling.high_freq_factor = 1");
}
TEST(LlamaErrors, Gpt2RefusesTheLlamaKeys) {
  GPTConfig c;
  c.num_key_value_heads = 2;
  expect_config_error([&] { c.validate(); },
                      "model.num_key_value_heads = 2 applies to model.arch = llama");
  c = GPTConfig();
  c.tie_word_embeddings = false;
  expect_config_error([&] { c.validate(); },
                      "model.tie_word_embeddings = false needs model.arch = llama");
  c = GPTConfig();
  c.rope_theta = 500000;
  expect_config_error([&] { c.validate(); }, "model.rope_theta = 500000 applies to model.arch");
}
// The model refuses as the config does, before any layer is built.
TEST(LlamaErrors, TheModelValidatesItsConfig) {
  expect_config_error([] { GPT<float> m(llama(4, 3, 16)); },
                      "model.num_key_value_heads = 3 must divide model.n_head = 4");
}

}  // namespace
}  // namespace kiri::model
