#pragma once
// The model's shape, shared by the runtime (model/gpt.h builds it) and the planner: the
// architecture, the dimensions and Llama's keys. Numbers only; no layers.
#include <cstdint>

namespace kiri {

// The architecture: model.arch, and the planner's model (plan::ModelSpec).
enum class Arch {
  kGpt2,   // GPT-2/GPT-3: biases, learned positions, GELU MLP 4h, LayerNorm, tied LM head
  kLlama,  // LLaMA: no biases, rotary positions, SwiGLU MLP of width ffn, RMSNorm,
           // grouped-query attention, LM head tied or not (tie_word_embeddings)
};

// Llama 3's rope_scaling ({"rope_type": "llama3", ...} in a config.json).
struct RopeScaling {
  enum class Type { kNone, kLlama3 };
  Type type = Type::kNone;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// The model's shape. kiri's names for the shared keys and Hugging Face's:
// n_layer = num_hidden_layers, n_head = num_attention_heads, n_embd =
// hidden_size, block_size = max_position_embeddings (GPT-2: n_positions); the
// Llama keys are LlamaConfig's own.
struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 256;
  int vocab_size = 50257;
  int block_size = 256;  // longest sequence (GPT-2: rows of wpe)
  Arch arch = Arch::kGpt2;
  // Llama only (GPT-2 takes the defaults):
  int num_key_value_heads = 0;  // 0: n_head (multi-head attention)
  int intermediate_size = 0;    // the MLP's width; 0: 4 x n_embd
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling{};
  bool tie_word_embeddings = true;  // GPT-2: always

  bool llama() const { return arch == Arch::kLlama; }
  int kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : n_head; }
  int64_t mlp_width() const {
    return intermediate_size > 0 ? intermediate_size : 4 * int64_t{n_embd};
  }
  int head_dim() const { return n_embd / n_head; }
  // The parameter names of the token embedding and of the untied LM head.
  const char* token_embedding_name() const {
    return llama() ? "model.embed_tokens.weight" : "transformer.wte.weight";
  }

  // Raises kConfig naming the numbers when the shape is impossible.
  void validate() const;
  // ... or cannot be cut over tp tensor-parallel ranks (heads, MLP columns).
  // (kiri::validate_layout's rules for tp, and sequence parallelism's tp > 1).
  void validate_tensor_parallel(int tp, bool sequence_parallel = false) const;
  int64_t num_parameters() const;
  // Model FLOPs per token for forward+backward at sequence length seq:
  // 6 * (parameters in matmuls, incl. the LM head) + 12 * n_layer * n_embd * seq (attention).
  double flops_per_token(int64_t seq) const;
};

}  // namespace kiri
