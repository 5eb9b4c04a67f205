#pragma once
// kiri's GPT-2 and Hugging Face's GPT2LMHeadModel (transformers' GPT2Config), both ways and
// side by side, as torchtitan's state_dict_adapter.py: the parameter names and config.json.
// kiri's parameters carry HF's names and layouts (nn::Parameter; Linear in Conv1D's [in, out]),
// so no tensor is transposed or permuted on the way.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/hf/hf_model.h"

namespace kiri::ckpt::hf {

struct Gpt2Adapter {
  // kiri's parameter name as GPT2LMHeadModel's: the same (transformer.*, lm_head.weight).
  static std::string to_hf(const std::string& name) { return name; }
  // A name in a GPT-2 folder as kiri's: GPT2Model's files lack the `transformer.` prefix,
  // which is added; the attention-mask buffers (attn.bias, attn.masked_bias) are nullopt:
  // computed from config.json, not loaded.
  static std::optional<std::string> from_hf(const std::string& name);
  // GPT2Config's keys for kiri's GPT-2 (no dropout, biases everywhere, LayerNorm eps 1e-5,
  // tanh GELU, a tied LM head); the token ids and the "kiri" block are hf_config_json's.
  static nlohmann::json to_hf_config(const kiri::GPTConfig& m, DType dtype);
  // config.json `c` (the file `path`) as kiri's GPT-2: kCheckpoint naming the key and value
  // for what kiri's GPT-2 cannot be (read_hf_config, hf_model.h). The "kiri" block is the
  // caller's.
  static HfConfig from_hf_config(const nlohmann::json& c, const std::string& path);
};

}  // namespace kiri::ckpt::hf
