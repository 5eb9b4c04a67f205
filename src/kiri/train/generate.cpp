#include "kiri/train/generate.h"

#include <algorithm>
#include <cmath>

namespace kiri::train {

std::vector<std::pair<int32_t, double>> sampling_distribution(const float* logits, int v,
                                                              const SampleOptions& o) {
  if (o.temperature <= 0)
    return {{static_cast<int32_t>(std::max_element(logits, logits + v) - logits), 1.0}};
  std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(v));
  for (int i = 0; i < v; ++i) cand[i] = {logits[i], i};
  // Most likely first, the lower id first on a tie: the kept set does not depend on the sort.
  const auto likelier = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  const size_t k = o.top_k > 0 && o.top_k < v ? static_cast<size_t>(o.top_k) : cand.size();
  std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(k), cand.end(),
                    likelier);
  cand.resize(k);
  std::vector<std::pair<int32_t, double>> out(cand.size());
  double sum = 0;
  for (size_t i = 0; i < cand.size(); ++i) {
    out[i] = {cand[i].second, std::exp((cand[i].first - cand[0].first) / o.temperature)};
    sum += out[i].second;
  }
  for (auto& p : out) p.second /= sum;
  if (o.top_p < 1) {
    // The smallest prefix whose mass reaches top_p (at least one id).
    double mass = 0;
    size_t n = 0;
    while (n < out.size() && (n == 0 || mass < o.top_p)) mass += out[n++].second;
    out.resize(n);
    for (auto& p : out) p.second /= mass;
  }
  return out;
}

namespace {
int32_t pick(const float* logits, int v, const SampleOptions& o, Rng& rng) {
  const std::vector<std::pair<int32_t, double>> dist = sampling_distribution(logits, v, o);
  if (dist.size() == 1) return dist[0].first;  // greedy, or one id left: no draw
  double r = rng.uniform();
  for (const auto& [id, p] : dist) {
    r -= p;
    if (r <= 0) return id;
  }
  return dist.back().first;
}
}  // namespace

std::vector<int32_t> generate(model::GPT<float>& model, Allocator& allocator,
                              std::vector<int32_t> ids, const SampleOptions& options,
                              int allowed_vocab, const std::function<void(int32_t)>& on_token) {
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
    if (on_token) on_token(ids.back());
    if (ids.back() == options.stop_token) break;
  }
  return ids;
}

}  // namespace kiri::train
