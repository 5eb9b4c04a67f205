// The per-model adapters (gpt2_adapter.h, llama_adapter.h): the parameter names both ways and
// config.json both ways.
#include <gtest/gtest.h>

#include "kiri/ckpt/hf/gpt2_adapter.h"
#include "kiri/ckpt/hf/llama_adapter.h"

namespace kiri::ckpt::hf {
namespace {

TEST(HfAdapter, Gpt2NamesGainTheTransformerPrefixAndSkipTheMasks) {
  EXPECT_EQ(Gpt2Adapter::from_hf("h.0.attn.c_attn.weight"), "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(Gpt2Adapter::from_hf("transformer.wte.weight"), "transformer.wte.weight");
  EXPECT_EQ(Gpt2Adapter::from_hf("lm_head.weight"), "lm_head.weight");
  EXPECT_EQ(Gpt2Adapter::from_hf("h.0.attn.bias"), std::nullopt);
  EXPECT_EQ(Gpt2Adapter::from_hf("transformer.h.3.attn.masked_bias"), std::nullopt);
  EXPECT_EQ(Gpt2Adapter::to_hf("transformer.h.0.mlp.c_fc.weight"),
            "transformer.h.0.mlp.c_fc.weight");
}

TEST(HfAdapter, LlamaNamesAreKirisAndTheRotaryBufferIsSkipped) {
  EXPECT_EQ(LlamaAdapter::from_hf("model.layers.0.self_attn.q_proj.weight"),
            "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(LlamaAdapter::from_hf("model.layers.0.self_attn.rotary_emb.inv_freq"), std::nullopt);
  EXPECT_EQ(LlamaAdapter::to_hf("model.norm.weight"), "model.norm.weight");
}

TEST(HfAdapter, ConfigJsonRoundTripsThroughEachAdapter) {
  kiri::GPTConfig gpt2;
  gpt2.n_layer = 2;
  gpt2.n_head = 2;
  gpt2.n_embd = 32;
  gpt2.vocab_size = 257;
  gpt2.block_size = 16;
  const nlohmann::json g = Gpt2Adapter::to_hf_config(gpt2, DType::kF32);
  EXPECT_FALSE(LlamaAdapter::is_config(g));
  const HfConfig gb = Gpt2Adapter::from_hf_config(g, "gpt2/config.json");
  EXPECT_EQ(gb.model.n_layer, 2);
  EXPECT_EQ(gb.model.n_embd, 32);
  EXPECT_EQ(gb.model.vocab_size, 257);
  EXPECT_EQ(gb.model.block_size, 16);

  kiri::GPTConfig llama = gpt2;
  llama.arch = kiri::Arch::kLlama;
  llama.n_head = 4;
  llama.num_key_value_heads = 2;
  llama.intermediate_size = 48;
  const nlohmann::json l = LlamaAdapter::to_hf_config(llama, DType::kBF16);
  EXPECT_TRUE(LlamaAdapter::is_config(l));
  EXPECT_EQ(l["torch_dtype"], "bfloat16");
  const HfConfig lb = LlamaAdapter::from_hf_config(l, "llama/config.json");
  EXPECT_TRUE(lb.model.llama());
  EXPECT_EQ(lb.model.n_head, 4);
  EXPECT_EQ(lb.model.kv_heads(), 2);
  EXPECT_EQ(lb.model.mlp_width(), 48);
}

}  // namespace
}  // namespace kiri::ckpt::hf
