// GPTConfig's own methods, apart from the model in gpt.cpp: they need no kernels, so the
// config reader's fuzz target (fuzz/) links this file alone.
#include "kiri/model/gpt.h"

namespace kiri::model {

void GPTConfig::validate() const {
  KIRI_CHECK_KIND(kConfig, n_layer >= 1, "model.n_layer must be >= 1, got ", n_layer);
  KIRI_CHECK_KIND(kConfig, n_head >= 1, "model.n_head must be >= 1, got ", n_head);
  KIRI_CHECK_KIND(kConfig, n_embd >= 1, "model.n_embd must be >= 1, got ", n_embd);
  KIRI_CHECK_KIND(kConfig, n_embd % n_head == 0, "model.n_head = ", n_head,
                  " must divide model.n_embd = ", n_embd);
  KIRI_CHECK_KIND(kConfig, vocab_size >= 2, "model.vocab_size must be >= 2, got ", vocab_size);
  KIRI_CHECK_KIND(kConfig, block_size >= 1, "model.block_size must be >= 1, got ", block_size);
}

int64_t GPTConfig::num_parameters() const {
  const int64_t c = n_embd, l = n_layer;
  const int64_t per_block =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return int64_t{vocab_size} * c + int64_t{block_size} * c + l * per_block + 2 * c;
}

double GPTConfig::flops_per_token(int64_t seq) const {
  const double c = n_embd, l = n_layer;
  const double matmul_params = l * 12.0 * c * c + double(vocab_size) * c;
  return 6.0 * matmul_params + 12.0 * l * c * double(seq);
}

}  // namespace kiri::model
