#pragma once
// A Llama folder's config.json (transformers' LlamaConfig) read as kiri's model: the half of
// read_hf_config (hf_model.h) for model_type "llama"; and what both architectures' readers
// share: the keys every config.json may hold, and the "kiri" block.
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/hf/hf_model.h"

namespace kiri::ckpt::hf {

// Whether config.json `c` is a Llama's: model_type "llama", or no model_type and
// LlamaForCausalLM among its architectures.
bool is_llama_config(const nlohmann::json& c);

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
HfConfig read_llama_config(const nlohmann::json& c, const std::string& path);

// Every key of config.json `c` is one its reader maps (`read`), bookkeeping that leaves the
// model's function unchanged (docs/checkpoints.md lists it: transformers_version, the token
// ids, generation defaults, ...), or a key that must hold transformers' default
// (is_encoder_decoder, pruned_heads, ...): kCheckpoint naming `path`, the key and its value
// otherwise. torch_dtype / dtype must be float32, bfloat16 or float16 and agree.
void check_config_keys(const nlohmann::json& c, const std::string& path,
                       std::span<const char* const> read);

// The "kiri" block kiri writes ({"format_version": 1, "tokenizer": data.tokenizer}) into
// out.tokenizer; kCheckpoint naming `path`, the key and its value for anything else.
void read_kiri_block(const nlohmann::json& c, const std::string& path, HfConfig& out);

}  // namespace kiri::ckpt::hf
