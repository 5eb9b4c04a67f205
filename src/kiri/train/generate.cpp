#include "kiri/train/generate.h"

#include <algorithm>
#include <cmath>

namespace kiri::train {

namespace {
// Picks an id from logits[0, v) at the temperature, optionally among the top k.
int32_t pick(const float* logits, int v, const SampleOptions& o, Rng& rng) {
  if (o.temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits, logits + v) - logits);
  std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(v));
  for (int i = 0; i < v; ++i) cand[i] = {logits[i], i};
  if (o.top_k > 0 && o.top_k < v) {
    std::partial_sort(cand.begin(), cand.begin() + o.top_k, cand.end(),
                      [](auto& a, auto& b) { return a.first > b.first; });
    cand.resize(static_cast<size_t>(o.top_k));
  }
  float mx = cand[0].first;
  for (auto& c : cand) mx = std::max(mx, c.first);
  std::vector<double> p(cand.size());
  double sum = 0;
  for (size_t i = 0; i < cand.size(); ++i)
    sum += p[i] = std::exp((cand[i].first - mx) / o.temperature);
  double r = rng.uniform() * sum;
  for (size_t i = 0; i < cand.size(); ++i) {
    r -= p[i];
    if (r <= 0) return cand[i].second;
  }
  return cand.back().second;
}
}  // namespace

std::vector<int32_t> generate(model::GPT<float>& model, Allocator& allocator,
                              std::vector<int32_t> ids, const SampleOptions& options,
                              int allowed_vocab) {
  KIRI_CHECK(!ids.empty(), "sampling needs a prompt of at least one token");
  const int block = model.config().block_size;
  allowed_vocab = std::min(allowed_vocab, model.config().vocab_size);
  nn::Context ctx{allocator, /*training=*/false};
  Rng rng(options.seed);
  for (int64_t n = 0; n < options.tokens; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), block);
    Tensor x = Tensor::empty({1, t}, DType::kI32, Category::kActivations, allocator);
    std::copy(ids.end() - t, ids.end(), x.data<int32_t>());
    Tensor logits = model.next_token_logits(ctx, x);
    ids.push_back(pick(logits.data<float>(), allowed_vocab, options, rng));
    if (ids.back() == options.stop_token) break;
  }
  return ids;
}

}  // namespace kiri::train
