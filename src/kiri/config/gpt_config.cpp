// GPTConfig's own methods: the shape's rules, its parameters and FLOPs (no kernels).
#include "kiri/config/gpt_config.h"

#include "kiri/base/error.h"
#include "kiri/config/layout.h"

namespace kiri {

namespace {

// GPT-2 takes the Llama keys' defaults only: a value set for it would be ignored.
void refuse_llama_keys(const GPTConfig& c) {
  const GPTConfig d;
  const auto only_llama = [](const char* key, const auto& value) {
    KIRI_RAISE(kConfig, "model.", key, " = ", value,
               " applies to model.arch = llama (model.arch is gpt2)");
  };
  if (c.num_key_value_heads != 0 && c.num_key_value_heads != c.n_head)
    only_llama("num_key_value_heads", c.num_key_value_heads);
  if (c.intermediate_size != 0 && c.intermediate_size != 4 * int64_t{c.n_embd})
    only_llama("intermediate_size", c.intermediate_size);
  if (c.rms_norm_eps != d.rms_norm_eps) only_llama("rms_norm_eps", c.rms_norm_eps);
  if (c.rope_theta != d.rope_theta) only_llama("rope_theta", c.rope_theta);
  if (c.rope_scaling.type != RopeScaling::Type::kNone)
    only_llama("rope_scaling.rope_type", "llama3");
  KIRI_CHECK_KIND(kConfig, c.tie_word_embeddings,
                  "model.tie_word_embeddings = false needs model.arch = llama (GPT-2 ties its LM "
                  "head to the token embedding)");
}

void validate_llama(const GPTConfig& c) {
  KIRI_CHECK_KIND(kConfig, c.num_key_value_heads >= 0 && c.num_key_value_heads <= c.n_head,
                  "model.num_key_value_heads = ", c.num_key_value_heads, " must be in [0, ",
                  c.n_head, "] (0: model.n_head = ", c.n_head, ")");
  KIRI_CHECK_KIND(kConfig, c.n_head % c.kv_heads() == 0,
                  "model.num_key_value_heads = ", c.kv_heads(),
                  " must divide model.n_head = ", c.n_head,
                  " (each key/value head serves n_head / num_key_value_heads query heads)");
  KIRI_CHECK_KIND(kConfig, c.head_dim() % 2 == 0,
                  "the head dimension model.n_embd / model.n_head = ", c.n_embd, " / ", c.n_head,
                  " = ", c.head_dim(), " must be even (rotary embedding turns columns in pairs)");
  KIRI_CHECK_KIND(kConfig, c.intermediate_size >= 0, "model.intermediate_size must be >= 0, got ",
                  c.intermediate_size);
  KIRI_CHECK_KIND(kConfig, c.rms_norm_eps > 0, "model.rms_norm_eps must be > 0, got ",
                  c.rms_norm_eps);
  KIRI_CHECK_KIND(kConfig, c.rope_theta > 1, "model.rope_theta must be > 1, got ", c.rope_theta);
  const RopeScaling& r = c.rope_scaling;
  if (r.type == RopeScaling::Type::kNone) return;
  KIRI_CHECK_KIND(kConfig, r.factor >= 1, "model.rope_scaling.factor must be >= 1, got ", r.factor);
  KIRI_CHECK_KIND(
      kConfig, r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
      "model.rope_scaling.low_freq_factor = ", r.low_freq_factor,
      " must be > 0 and below model.rope_scaling.high_freq_factor = ", r.high_freq_factor);
  KIRI_CHECK_KIND(kConfig, r.original_max_position_embeddings >= 1,
                  "model.rope_scaling.original_max_position_embeddings must be >= 1, got ",
                  r.original_max_position_embeddings);
}

}  // namespace

void GPTConfig::validate() const {
  KIRI_CHECK_KIND(kConfig, n_layer >= 1, "model.n_layer must be >= 1, got ", n_layer);
  KIRI_CHECK_KIND(kConfig, n_head >= 1, "model.n_head must be >= 1, got ", n_head);
  KIRI_CHECK_KIND(kConfig, n_embd >= 1, "model.n_embd must be >= 1, got ", n_embd);
  KIRI_CHECK_KIND(kConfig, n_embd % n_head == 0, "model.n_head = ", n_head,
                  " must divide model.n_embd = ", n_embd);
  KIRI_CHECK_KIND(kConfig, vocab_size >= 2, "model.vocab_size must be >= 2, got ", vocab_size);
  KIRI_CHECK_KIND(kConfig, block_size >= 1, "model.block_size must be >= 1, got ", block_size);
  if (llama())
    validate_llama(*this);
  else
    refuse_llama_keys(*this);
}

void GPTConfig::validate_tensor_parallel(int tp, bool sequence_parallel) const {
  kiri::Layout l;
  l.tp = tp;
  l.sequence_parallel = sequence_parallel;
  kiri::LayoutFacts f;  // the layout's rules for tp: heads (query, key/value) and MLP width
  f.n_head = static_cast<int>(n_head);
  f.kv_heads = kv_heads();
  f.mlp_width = mlp_width();
  kiri::validate_layout(l, f);
}

int64_t GPTConfig::num_parameters() const {
  const int64_t c = n_embd, l = n_layer, v = vocab_size;
  if (llama()) {
    const int64_t kv = int64_t{head_dim()} * kv_heads(), mlp = mlp_width();
    const int64_t per_block = 2 * c + 2 * c * c + 2 * c * kv + 3 * c * mlp;
    return v * c + l * per_block + c + (tie_word_embeddings ? 0 : v * c);
  }
  const int64_t per_block =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return v * c + int64_t{block_size} * c + l * per_block + 2 * c;
}

double GPTConfig::flops_per_token(int64_t seq) const {
  const double c = n_embd, l = n_layer;
  const double per_block = llama() ? 2.0 * c * c + 2.0 * c * head_dim() * kv_heads() +
                                         3.0 * c * static_cast<double>(mlp_width())
                                   : 12.0 * c * c;
  const double matmul_params = l * per_block + double(vocab_size) * c;
  return 6.0 * matmul_params + 12.0 * l * c * double(seq);
}

}  // namespace kiri
