#pragma once
// Deterministic batching over a token sequence (in memory or memory-mapped). Sample i is the window
// tokens[i*T, i*T + T + 1): inputs are its first T tokens, targets the last T.
// The training stream is infinite: position p falls in epoch p / num_samples,
// and each epoch visits the samples in a permutation drawn from (seed, epoch).
// The whole state of a reader is the integer position, so a checkpoint saves
// just that, and a distributed sampler can hand rank r the positions
// r, r + dp, ... of each global batch without any shared state.
#include <cstdint>
#include <mutex>
#include <vector>

#include "kiri/data/token_source.h"

namespace kiri::data {

class SampleStream {
 public:
  // Raises kInvalidArgument when seq_len < 1 or the tokens hold no whole
  // sample ((n - 1) / seq_len == 0), naming n and seq_len.
  SampleStream(std::vector<int32_t> tokens, int64_t seq_len, uint64_t seed);
  // The same over tokens read in place (mapped shards): each window is converted
  // to int32 as it is filled.
  SampleStream(TokenSource tokens, int64_t seq_len, uint64_t seed);
  // Movable (the cache's mutex is not moved but made anew); not copyable.
  SampleStream(SampleStream&& other) noexcept;

  // Fine-tuning data: mask holds one 0/1 per token (as many as the tokens; else kData); a
  // target whose mask is 0 is filled as -1, which the loss skips (docs/data.md).
  void set_loss_mask(TokenSource mask);
  bool masked() const { return mask_.size() > 0; }
  // How many targets of the sample at this position the loss counts (seq_len unmasked).
  int64_t counted_targets(uint64_t position) const;

  int64_t seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  uint64_t num_samples() const { return num_samples_; }
  const TokenSource& tokens() const { return tokens_; }

  // Which sample the stream yields at this position (shuffled per epoch).
  uint64_t sample_index(uint64_t position) const;
  static uint64_t epoch_of(uint64_t position, uint64_t num_samples) {
    return position / num_samples;
  }

  // Fills seq_len inputs and seq_len targets for the sample at this position.
  void fill(uint64_t position, int32_t* inputs, int32_t* targets) const;
  // Fills count consecutive positions into [count, seq_len] row-major buffers.
  void fill_batch(uint64_t first_position, int64_t count, int32_t* inputs, int32_t* targets) const;
  // Sample i in order, unshuffled (validation). Raises unless i < num_samples().
  void fill_sequential(uint64_t i, int32_t* inputs, int32_t* targets) const;

  // The permutation of [0, n) that epoch `epoch` of a stream with this seed uses.
  static std::vector<uint32_t> epoch_permutation(uint64_t seed, uint64_t epoch, uint64_t n);

 private:
  void fill_sample(uint64_t sample, int32_t* inputs, int32_t* targets) const;

  TokenSource tokens_;
  TokenSource mask_;  // empty: every target counts
  int64_t seq_len_;
  uint64_t seed_;
  uint64_t num_samples_;
  // The current epoch's permutation, recomputed when the epoch changes.
  mutable std::mutex mutex_;
  mutable uint64_t cached_epoch_ = UINT64_MAX;
  mutable std::vector<uint32_t> permutation_;
};

}  // namespace kiri::data
