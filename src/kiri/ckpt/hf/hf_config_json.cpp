// config.json as kiri writes it: GPT2Config's or LlamaConfig's keys, in the spellings that
// transformers 4 and 5 both read (docs/checkpoints.md).
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/data/hf_tokenizer.h"

namespace kiri::ckpt::hf {

using nlohmann::json;

const char* torch_dtype_name(DType d) {
  switch (d) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      KIRI_RAISE(kConfig, "a model folder holds F32, BF16 or F16 weights, not ", dtype_name(d));
  }
}

namespace {

// LlamaConfig's keys for kiri's llama (no biases, SiLU, no dropout). The rotary embedding in
// both spellings, which say the same: transformers 4 reads rope_theta + rope_scaling, 5 reads
// rope_scaling when it is not null and rope_parameters otherwise, and writes rope_parameters.
json llama_config_json(const kiri::GPTConfig& m, DType dtype) {
  json scaling = nullptr;
  json params = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  if (m.rope_scaling.type == kiri::RopeScaling::Type::kLlama3) {
    scaling = {
        {"rope_type", "llama3"},
        {"factor", m.rope_scaling.factor},
        {"low_freq_factor", m.rope_scaling.low_freq_factor},
        {"high_freq_factor", m.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", m.rope_scaling.original_max_position_embeddings}};
    params = scaling;
    params["rope_theta"] = m.rope_theta;
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", m.n_embd},
          {"intermediate_size", m.mlp_width()},
          {"num_hidden_layers", m.n_layer},
          {"num_attention_heads", m.n_head},
          {"num_key_value_heads", m.kv_heads()},
          {"head_dim", m.head_dim()},
          {"max_position_embeddings", m.block_size},
          {"vocab_size", m.vocab_size},
          {"rms_norm_eps", m.rms_norm_eps},
          {"rope_theta", m.rope_theta},
          {"rope_scaling", scaling},
          {"rope_parameters", params},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"pretraining_tp", 1},
          {"tie_word_embeddings", m.tie_word_embeddings},
          {"use_cache", true},
          // transformers 4's name, which 5 reads too when there is no "dtype"; 5's own name
          // would outlive a transformers 4 load and save in another dtype as a stale key.
          {"torch_dtype", torch_dtype_name(dtype)}};
}

}  // namespace

int32_t hf_bos_token(const data::Tokenizer& tokenizer) {
  const auto* hf = dynamic_cast<const data::HfTokenizer*>(&tokenizer);
  return hf && hf->bos_token() >= 0 ? hf->bos_token() : tokenizer.eot_token();
}

json hf_config_json(const kiri::GPTConfig& m, int32_t eot, DType dtype,
                    const std::string& tokenizer, int32_t bos) {
  if (bos < 0) bos = eot;
  if (m.llama()) {
    json c = llama_config_json(m, dtype);
    c["kiri"] = {{"format_version", 1}, {"tokenizer", tokenizer}};
    if (bos >= 0) c["bos_token_id"] = bos;
    if (eot >= 0) c["eos_token_id"] = eot;
    return c;
  }
  json c = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_layer", m.n_layer},
            {"n_head", m.n_head},
            {"n_embd", m.n_embd},
            {"n_positions", m.block_size},
            {"n_ctx", m.block_size},
            {"n_inner", nullptr},
            {"vocab_size", m.vocab_size},
            {"layer_norm_epsilon", 1e-5},
            {"activation_function", "gelu_new"},
            // kiri trains without dropout: fine-tuning in transformers then matches it.
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"initializer_range", 0.02},
            {"scale_attn_weights", true},
            {"scale_attn_by_inverse_layer_idx", false},
            {"reorder_and_upcast_attn", false},
            {"tie_word_embeddings", true},
            {"use_cache", true},
            {"torch_dtype", torch_dtype_name(dtype)},  // both versions' (see the Llama's)
            {"kiri", {{"format_version", 1}, {"tokenizer", tokenizer}}}};
  if (bos >= 0) c["bos_token_id"] = bos;
  if (eot >= 0) c["eos_token_id"] = eot;
  return c;
}

}  // namespace kiri::ckpt::hf
