#pragma once
// Autoregressive sampling from a model: temperature 0 is greedy decoding.
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/model/gpt.h"

namespace kiri::train {

struct SampleOptions {
  int64_t tokens = 100;
  double temperature = 1.0;  // 0: argmax
  int top_k = 0;             // 0: the whole vocabulary
  double top_p = 1.0;        // nucleus: 1 keeps every token top_k kept
  uint64_t seed = 0;
  // Generation ends after this id (the tokenizer's end-of-text, which config.json names as
  // eos_token_id: transformers' generate() stops there too); -1: after `tokens` ids.
  int32_t stop_token = -1;
};

// The ids that sampling from logits[0, v) may pick, with their probabilities (summing to 1),
// most likely first (ties: the lower id first): the softmax at the temperature over the top_k
// most likely ids, then the smallest prefix of those whose probability mass reaches top_p.
// Temperature 0: the argmax alone, probability 1.
std::vector<std::pair<int32_t, double>> sampling_distribution(const float* logits, int v,
                                                              const SampleOptions& options);

// Returns prompt + generated ids, the stop token included when it came. The context is cropped to
// the model's block_size. `allowed_vocab` limits sampling to ids below it (the tokenizer's
// vocabulary when the model's is padded). `on_token`, when set, is called with each new id as
// soon as it is picked (streamed output).
std::vector<int32_t> generate(model::GPT<float>& model, Allocator& allocator,
                              std::vector<int32_t> prompt, const SampleOptions& options,
                              int allowed_vocab,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace kiri::train
