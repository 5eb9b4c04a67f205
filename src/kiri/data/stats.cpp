#include "kiri/data/stats.h"

#include <cmath>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::data {

double unigram_entropy_nats(std::span<const int32_t> tokens, int vocab) {
  KIRI_CHECK(vocab > 0, "vocab ", vocab, " must be positive");
  KIRI_CHECK(!tokens.empty(), "the entropy of 0 tokens is undefined");
  std::vector<uint64_t> counts(vocab, 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    KIRI_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "token ", tokens[i], " at position ", i,
               " is outside [0, ", vocab, ")");
    ++counts[tokens[i]];
  }
  const double n = static_cast<double>(tokens.size());
  double h = 0.0;
  for (uint64_t c : counts)
    if (c > 0) h -= (c / n) * std::log(c / n);
  return h;
}

}  // namespace kiri::data
