#include "kiri/data/sample_stream.h"

#include <algorithm>
#include <numeric>

#include "kiri/base/error.h"
#include "kiri/base/rng.h"

namespace kiri::data {

namespace {

// Keeps epoch shuffles apart from every other use of the run's seed.
const uint64_t kShuffleStream = hash_string("kiri.data.epoch_shuffle");

}  // namespace

SampleStream::SampleStream(std::vector<int32_t> tokens, int64_t seq_len, uint64_t seed)
    : SampleStream(TokenSource(std::move(tokens)), seq_len, seed) {}

SampleStream::SampleStream(TokenSource tokens, int64_t seq_len, uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed) {
  KIRI_CHECK(seq_len >= 1, "seq_len ", seq_len, " must be at least 1");
  const uint64_t n = tokens_.size();
  num_samples_ = n == 0 ? 0 : (n - 1) / static_cast<uint64_t>(seq_len);
  KIRI_CHECK(num_samples_ > 0, n, " tokens hold no sample of seq_len ", seq_len,
             " (a sample needs seq_len + 1 = ", seq_len + 1, " tokens)");
  KIRI_CHECK(num_samples_ <= UINT32_MAX, num_samples_, " samples exceed the 2^32 a stream indexes");
}

SampleStream::SampleStream(SampleStream&& other) noexcept
    : tokens_(std::move(other.tokens_)),
      mask_(std::move(other.mask_)),
      seq_len_(other.seq_len_),
      seed_(other.seed_),
      num_samples_(other.num_samples_),
      cached_epoch_(other.cached_epoch_),
      permutation_(std::move(other.permutation_)) {
  other.cached_epoch_ = UINT64_MAX;
}

std::vector<uint32_t> SampleStream::epoch_permutation(uint64_t seed, uint64_t epoch, uint64_t n) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  // Fisher-Yates over counter-based draws: the (seed, epoch) pair alone fixes the order.
  const uint64_t stream = hash_combine(kShuffleStream, epoch);
  for (uint64_t i = n; i > 1; --i) {
    // Multiply-shift maps 64 random bits onto [0, i) without modulo's bias toward low values.
    const uint64_t bits = random_bits(seed, stream, i);
    const auto j = static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * i) >> 64);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

uint64_t SampleStream::sample_index(uint64_t position) const {
  const uint64_t epoch = position / num_samples_;
  std::lock_guard<std::mutex> lock(mutex_);
  if (epoch != cached_epoch_) {
    permutation_ = epoch_permutation(seed_, epoch, num_samples_);
    cached_epoch_ = epoch;
  }
  return permutation_[position % num_samples_];
}

void SampleStream::fill_sample(uint64_t sample, int32_t* inputs, int32_t* targets) const {
  // Inputs are the window's first T tokens, targets the same shifted by one.
  const uint64_t first = sample * static_cast<uint64_t>(seq_len_);
  const auto t = static_cast<uint64_t>(seq_len_);
  tokens_.read(first, t, inputs);
  std::copy(inputs + 1, inputs + t, targets);
  tokens_.read(first + t, 1, targets + t - 1);
  if (!masked()) return;
  std::vector<int32_t> m(t);
  mask_.read(first + 1, t, m.data());  // the targets' own positions
  for (uint64_t i = 0; i < t; ++i)
    if (m[i] == 0) targets[i] = -1;
}

void SampleStream::set_loss_mask(TokenSource mask) {
  if (mask.size() != tokens_.size())
    KIRI_RAISE(kData, "the loss mask holds ", mask.size(), " values for ", tokens_.size(),
               " tokens");
  mask_ = std::move(mask);
}

int64_t SampleStream::counted_targets(uint64_t position) const {
  if (!masked()) return seq_len_;
  const auto t = static_cast<uint64_t>(seq_len_);
  std::vector<int32_t> m(t);
  mask_.read(sample_index(position) * t + 1, t, m.data());
  int64_t n = 0;
  for (const int32_t v : m) n += v != 0;
  return n;
}

void SampleStream::fill(uint64_t position, int32_t* inputs, int32_t* targets) const {
  fill_sample(sample_index(position), inputs, targets);
}

void SampleStream::fill_batch(uint64_t first_position, int64_t count, int32_t* inputs,
                              int32_t* targets) const {
  KIRI_CHECK(count >= 0, "batch count ", count);
  for (int64_t b = 0; b < count; ++b)
    fill(first_position + static_cast<uint64_t>(b), inputs + b * seq_len_, targets + b * seq_len_);
}

void SampleStream::fill_sequential(uint64_t i, int32_t* inputs, int32_t* targets) const {
  KIRI_CHECK(i < num_samples_, "sequential sample ", i, " is past the last of ", num_samples_,
             " samples");
  fill_sample(i, inputs, targets);
}

}  // namespace kiri::data
