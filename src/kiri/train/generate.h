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
};

// Returns prompt + generated ids. The context is cropped to the model's
// block_size. `allowed_vocab` limits sampling to ids below it (the
// tokenizer's vocabulary when the model's is padded).
std::vector<int32_t> generate(model::GPT<float>& model, Allocator& allocator,
                              std::vector<int32_t> prompt, const SampleOptions& options,
                              int allowed_vocab);

}  // namespace kiri::train
