#pragma once
// Autoregressive sampling from a model: temperature 0 is greedy decoding.
#include <cstdint>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/model/gpt.h"

namespace kiri::train {

struct SampleOptions {
  int64_t tokens = 100;
  double temperature = 1.0;  // 0: argmax
  int top_k = 0;             // 0: the whole vocabulary
  uint64_t seed = 0;
  // Generation ends after this id (the tokenizer's end-of-text, which config.json names as
  // eos_token_id: transformers' generate() stops there too); -1: after `tokens` ids.
  int32_t stop_token = -1;
};

// Returns prompt + generated ids, the stop token included when it came. The context is cropped to
// the model's block_size. `allowed_vocab` limits sampling to ids below it (the tokenizer's
// vocabulary when the model's is padded).
std::vector<int32_t> generate(model::GPT<float>& model, Allocator& allocator,
                              std::vector<int32_t> prompt, const SampleOptions& options,
                              int allowed_vocab);

}  // namespace kiri::train
