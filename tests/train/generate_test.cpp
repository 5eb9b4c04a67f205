// Sampling's stop token (generate.h): generation ends after the token that config.json names
// as eos_token_id, where transformers' generate() ends, and not before.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiri/model/gpt.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/train/generate.h"

namespace kiri::train {
namespace {

TEST(Generate, SamplingEndsAfterTheStopToken) {
  kiri::GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 11;
  c.block_size = 32;
  Allocator alloc;
  model::GPT<float> m(c);
  nn::ParameterStore store(m.parameters(), DType::kF32, alloc);
  store.initialize(3);
  SampleOptions o;
  o.tokens = 20;
  o.temperature = 1;  // a random init repeats one token greedily; sampled, ids vary
  o.seed = 7;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> all = generate(m, alloc, prompt, o, c.vocab_size);
  ASSERT_EQ(all.size(), 23u);
  // The first generated id that differs from the one before it: stopping there cuts the run.
  size_t k = 4;
  while (k < all.size() && all[k] == all[k - 1]) ++k;
  ASSERT_LT(k, all.size()) << "sampling repeated one token 20 times";
  o.stop_token = all[k];
  const std::vector<int32_t> stopped = generate(m, alloc, prompt, o, c.vocab_size);
  const size_t first =
      static_cast<size_t>(std::find(all.begin() + 3, all.end(), all[k]) - all.begin());
  EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), all.begin() + first + 1));
  o.stop_token = -1;  // none: every token
  EXPECT_EQ(generate(m, alloc, prompt, o, c.vocab_size), all);
}

}  // namespace
}  // namespace kiri::train
