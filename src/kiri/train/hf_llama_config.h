#pragma once
// A Llama folder's config.json (transformers' LlamaConfig) read as kiri's model: the half of
// read_hf_config (hf_model.h) for model_type "llama".
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/train/hf_model.h"

namespace kiri::train {

// Whether config.json `c` is a Llama's: model_type "llama", or no model_type and
// LlamaForCausalLM among its architectures.
bool is_llama_config(const nlohmann::json& c);

// LlamaConfig's keys as kiri's llama (docs/checkpoints.md, "Llama folders"): the shape keys
// (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
// max_position_embeddings) are required; num_key_value_heads, rms_norm_eps, rope_theta,
// rope_scaling and tie_word_embeddings take LlamaConfig's defaults when absent. kCheckpoint
// naming `path`, the key and its value for what kiri cannot build: attention_bias or mlp_bias
// true, a hidden_act other than silu, a head_dim other than hidden_size / num_attention_heads,
// a rope_scaling type other than default or llama3, architectures without LlamaForCausalLM,
// a shape kiri's model refuses. The "kiri" block is read by the caller.
HfConfig read_llama_config(const nlohmann::json& c, const std::string& path);

}  // namespace kiri::train
