// The model.* rows of the config schema (config_schema.cpp): both architectures' shape,
// and the Llama keys under Hugging Face LlamaConfig's names (docs/models.md).
#include "kiri/config/config_field.h"

namespace kiri {

void add_model_fields(std::vector<Field>& f) {
  f.push_back(enum_field(
      "model.arch", KIRI_FIELD(model.arch),
      std::vector<std::pair<std::string, kiri::Arch>>{{"gpt2", kiri::Arch::kGpt2},
                                                      {"llama", kiri::Arch::kLlama}},
      "The architecture (docs/models.md): `gpt2` (LayerNorm, learned positions, GELU MLP, "
      "biases, tied head; Hugging Face GPT2LMHeadModel) or `llama` (RMSNorm, rotary "
      "positions, SwiGLU MLP, grouped-query attention, no biases; LlamaForCausalLM). The "
      "keys below name Hugging Face's config.json keys where they differ."));
  f.push_back(int_field("model.n_layer", KIRI_FIELD(model.n_layer), 1, 4096,
                        "Transformer blocks (num_hidden_layers)."));
  f.push_back(int_field("model.n_head", KIRI_FIELD(model.n_head), 1, 4096,
                        "Attention (query) heads per block (num_attention_heads); must divide "
                        "model.n_embd."));
  f.push_back(int_field("model.n_embd", KIRI_FIELD(model.n_embd), 1, 1 << 20,
                        "Hidden size (hidden_size)."));
  f.push_back(int_field("model.vocab_size", KIRI_FIELD(model.vocab_size), 0, 1 << 24,
                        "Rows of the token embedding; 0 takes the tokenizer's (50257 for gpt2, "
                        "257 for byte). Must be at least the tokenizer's."));
  f.push_back(int_field("model.block_size", KIRI_FIELD(model.block_size), 1, 1 << 20,
                        "Longest sequence the model takes (max_position_embeddings; gpt2: the "
                        "rows of the position embedding); must be at least train.seq_len."));
  f.push_back(
      int_field("model.num_key_value_heads", KIRI_FIELD(model.num_key_value_heads), 0, 4096,
                "llama: key/value heads (grouped-query attention), dividing model.n_head; 0: "
                "model.n_head (multi-head attention), 1: multi-query. gpt2: 0 or model.n_head."));
  f.push_back(int_field("model.intermediate_size", KIRI_FIELD(model.intermediate_size), 0, 1 << 24,
                        "llama: the SwiGLU MLP's width (gate_proj, up_proj); 0: 4 x "
                        "model.n_embd. gpt2: 0 or 4 x model.n_embd."));
  f.push_back(float_field("model.rms_norm_eps", KIRI_FIELD(model.rms_norm_eps), 1e-12, 1,
                          "llama: the RMSNorms' epsilon."));
  f.push_back(float_field("model.rope_theta", KIRI_FIELD(model.rope_theta), 1, 1e12,
                          "llama: the rotary embedding's base (Llama 2: 10000, Llama 3: "
                          "500000)."));
  f.push_back(enum_field(
      "model.rope_scaling.rope_type", KIRI_FIELD(model.rope_scaling.type),
      std::vector<std::pair<std::string, kiri::RopeScaling::Type>>{
          {"default", kiri::RopeScaling::Type::kNone},
          {"llama3", kiri::RopeScaling::Type::kLlama3}},
      "llama: `default` (no rope_scaling) or Llama 3.1's `llama3` frequency scaling, with the "
      "four keys below."));
  f.push_back(float_field("model.rope_scaling.factor", KIRI_FIELD(model.rope_scaling.factor), 1,
                          1e6, "llama3 scaling: long wavelengths are slowed by this factor."));
  f.push_back(float_field("model.rope_scaling.low_freq_factor",
                          KIRI_FIELD(model.rope_scaling.low_freq_factor), 1e-6, 1e6,
                          "llama3 scaling: wavelengths above original_max_position_embeddings "
                          "/ low_freq_factor are scaled."));
  f.push_back(float_field("model.rope_scaling.high_freq_factor",
                          KIRI_FIELD(model.rope_scaling.high_freq_factor), 1e-6, 1e6,
                          "llama3 scaling: wavelengths below original_max_position_embeddings "
                          "/ high_freq_factor are kept; between the two, interpolated. Must "
                          "exceed low_freq_factor."));
  f.push_back(int_field("model.rope_scaling.original_max_position_embeddings",
                        KIRI_FIELD(model.rope_scaling.original_max_position_embeddings), 1, 1 << 24,
                        "llama3 scaling: the context length the model was trained at."));
  f.push_back(bool_field("model.tie_word_embeddings", KIRI_FIELD(model.tie_word_embeddings),
                         "Whether the LM head is the token embedding; false (llama only): its "
                         "own lm_head.weight. Hugging Face's LlamaConfig defaults to false, "
                         "kiri to true (GPT-2's): a Llama config gives it."));
}

}  // namespace kiri
