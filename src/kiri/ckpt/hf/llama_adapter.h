#pragma once
// kiri's Llama and Hugging Face's LlamaForCausalLM (transformers' LlamaConfig), both ways and
// side by side, as torchtitan's state_dict_adapter.py: the parameter names and config.json.
// kiri's parameters carry HF's names and layouts (model.*, lm_head.weight; nn.Linear's
// [out, in]), so no tensor is transposed or permuted on the way.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/hf/hf_model.h"

namespace kiri::ckpt::hf {

struct LlamaAdapter {
  // kiri's parameter name as LlamaForCausalLM's: the same.
  static std::string to_hf(const std::string& name) { return name; }
  // A name in a Llama folder as kiri's: the same; the rotary frequencies older transformers
  // saved (rotary_emb.inv_freq) are nullopt: computed from config.json, not loaded.
  static std::optional<std::string> from_hf(const std::string& name);
  // LlamaConfig's keys for kiri's Llama (no biases, SiLU, no dropout), the rotary embedding in
  // both transformers 4's and 5's spellings; the token ids and the "kiri" block are
  // hf_config_json's.
  static nlohmann::json to_hf_config(const kiri::GPTConfig& m, DType dtype);
  // Whether config.json `c` is a Llama's: model_type "llama", or no model_type and
  // LlamaForCausalLM among its architectures.
  static bool is_config(const nlohmann::json& c);

  // LlamaConfig's keys as kiri's llama (docs/checkpoints.md, "Llama folders"): the shape keys
  // (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
  // max_position_embeddings) are required; num_key_value_heads, rms_norm_eps, the rotary
  // embedding (transformers 4's rope_theta + rope_scaling, transformers 5's rope_parameters:
  // both read, and refused when they disagree) and tie_word_embeddings take LlamaConfig's
  // defaults when absent. kCheckpoint
  // naming `path`, the key and its value for what kiri cannot build: attention_bias or mlp_bias
  // true, a hidden_act other than silu, a head_dim other than hidden_size / num_attention_heads,
  // a rope type other than default or llama3 (in either spelling), a key check_config_keys
  // refuses, architectures without LlamaForCausalLM,
  // a shape kiri's model refuses. The "kiri" block is read by the caller.
  static HfConfig from_hf_config(const nlohmann::json& c, const std::string& path);
};

}  // namespace kiri::ckpt::hf
