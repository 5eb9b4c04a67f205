// Sampling (generate.h): the stop token (generation ends after the token that config.json names
// as eos_token_id, where transformers' generate() ends, and not before), top-k, top-p (on a
// hand-made distribution), seeds, and the streamed ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiri/model/gpt.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/train/generate.h"

namespace kiri::train {
namespace {

// A random GPT of one layer over 11 ids.
kiri::GPTConfig tiny() {
  kiri::GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.vocab_size = 11;
  c.block_size = 32;
  return c;
}

TEST(Generate, SamplingEndsAfterTheStopToken) {
  const kiri::GPTConfig c = tiny();
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

// Logits whose softmax at temperature 1 is 0.4, 0.3, 0.2, 0.1 for ids 2, 0, 3, 1.
const float kLogits[4] = {std::log(0.3f), std::log(0.1f), std::log(0.4f), std::log(0.2f)};

std::vector<int32_t> kept_ids(double top_p, int top_k = 0) {
  SampleOptions o;
  o.top_p = top_p;
  o.top_k = top_k;
  std::vector<int32_t> ids;
  for (const auto& [id, p] : sampling_distribution(kLogits, 4, o)) ids.push_back(id);
  return ids;
}

TEST(Generate, TopPKeepsTheSmallestPrefixReachingP) {
  using V = std::vector<int32_t>;
  EXPECT_EQ(kept_ids(1.0), (V{2, 0, 3, 1}));
  EXPECT_EQ(kept_ids(0.39), (V{2}));  // 0.4 reaches it
  EXPECT_EQ(kept_ids(0.41), (V{2, 0}));
  EXPECT_EQ(kept_ids(0.69), (V{2, 0}));  // 0.4 + 0.3
  EXPECT_EQ(kept_ids(0.71), (V{2, 0, 3}));
  EXPECT_EQ(kept_ids(0.95), (V{2, 0, 3, 1}));
  EXPECT_EQ(kept_ids(0.01), (V{2}));        // at least one
  EXPECT_EQ(kept_ids(0.95, 2), (V{2, 0}));  // top-k first: then p over what it kept
  SampleOptions o;
  o.top_p = 0.8;
  const auto d = sampling_distribution(kLogits, 4, o);
  ASSERT_EQ(d.size(), 3u);  // renormalized over 0.9
  EXPECT_NEAR(d[0].second, 0.4 / 0.9, 1e-6);
  EXPECT_NEAR(d[1].second, 0.3 / 0.9, 1e-6);
  EXPECT_NEAR(d[2].second, 0.2 / 0.9, 1e-6);
  o.temperature = 0;  // greedy: the argmax alone
  EXPECT_EQ(sampling_distribution(kLogits, 4, o),
            (std::vector<std::pair<int32_t, double>>{{2, 1.0}}));
}

TEST(Generate, TopKOneIsGreedyAndSeedsReproduce) {
  const kiri::GPTConfig c = tiny();
  Allocator alloc;
  model::GPT<float> m(c);
  nn::ParameterStore store(m.parameters(), DType::kF32, alloc);
  store.initialize(3);
  const std::vector<int32_t> prompt = {1, 2, 3};
  SampleOptions greedy;
  greedy.tokens = 12;
  greedy.temperature = 0;
  SampleOptions k1 = greedy;
  k1.temperature = 1.5;
  k1.top_k = 1;
  k1.seed = 99;
  EXPECT_EQ(generate(m, alloc, prompt, k1, c.vocab_size),
            generate(m, alloc, prompt, greedy, c.vocab_size));
  SampleOptions s = k1;
  s.top_k = 0;
  s.seed = 5;
  std::vector<int32_t> streamed;
  const std::vector<int32_t> a =
      generate(m, alloc, prompt, s, c.vocab_size, [&](int32_t id) { streamed.push_back(id); });
  EXPECT_EQ(streamed, std::vector<int32_t>(a.begin() + 3, a.end()));  // each new id, in order
  EXPECT_EQ(generate(m, alloc, prompt, s, c.vocab_size), a);
  s.seed = 6;
  EXPECT_NE(generate(m, alloc, prompt, s, c.vocab_size), a);
}

}  // namespace
}  // namespace kiri::train
