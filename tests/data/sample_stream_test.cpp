#include "kiri/data/sample_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "data/test_util.h"

namespace kiri::data {
namespace {

using testing::expect_error;

std::vector<int32_t> iota_tokens(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

TEST(SampleStream, WindowsAreNonOverlappingWithShiftedTargets) {
  SampleStream s(iota_tokens(23), 5, 1);
  EXPECT_EQ(s.num_samples(), 4u);  // (23 - 1) / 5
  std::vector<int32_t> in(5), tgt(5);
  for (uint64_t i = 0; i < 4; ++i) {
    s.fill_sequential(i, in.data(), tgt.data());
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(in[k], static_cast<int32_t>(i * 5 + k));
      EXPECT_EQ(tgt[k], in[k] + 1);
    }
  }
  expect_error([&] { s.fill_sequential(4, in.data(), tgt.data()); }, ErrorKind::kInvalidArgument,
               {"4", "4 samples"});
  // The last window may end exactly at the last token.
  SampleStream exact(iota_tokens(11), 5, 1);
  EXPECT_EQ(exact.num_samples(), 2u);
  exact.fill_sequential(1, in.data(), tgt.data());
  EXPECT_EQ(tgt[4], 10);
}

TEST(SampleStream, RefusesTooFewTokens) {
  expect_error([] { SampleStream(iota_tokens(5), 5, 0); }, ErrorKind::kInvalidArgument,
               {"5 tokens", "seq_len 5"});
  expect_error([] { SampleStream(std::vector<int32_t>{}, 4, 0); }, ErrorKind::kInvalidArgument,
               {"0 tokens"});
  expect_error([] { SampleStream(iota_tokens(10), 0, 0); }, ErrorKind::kInvalidArgument,
               {"seq_len 0"});
}

std::vector<uint64_t> order(const SampleStream& s, uint64_t first, uint64_t count) {
  std::vector<uint64_t> out;
  for (uint64_t p = first; p < first + count; ++p) out.push_back(s.sample_index(p));
  return out;
}

TEST(SampleStream, SameSeedSameOrderOtherSeedsDiffer) {
  const SampleStream a(iota_tokens(1001), 10, 42), b(iota_tokens(1001), 10, 42);
  const SampleStream c(iota_tokens(1001), 10, 43);
  EXPECT_EQ(order(a, 0, 300), order(b, 0, 300));
  EXPECT_NE(order(a, 0, 100), order(c, 0, 100));
  // Not the identity either.
  std::vector<uint64_t> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(order(a, 0, 100), identity);
}

TEST(SampleStream, EachEpochVisitsEverySampleOnce) {
  const SampleStream s(iota_tokens(1001), 10, 7);
  const uint64_t n = s.num_samples();
  ASSERT_EQ(n, 100u);
  std::vector<std::vector<uint64_t>> epochs;
  for (uint64_t e = 0; e < 4; ++e) {
    std::vector<uint64_t> o = order(s, e * n, n);
    epochs.push_back(o);
    std::sort(o.begin(), o.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(o[i], i) << "epoch " << e;
  }
  EXPECT_NE(epochs[0], epochs[1]);  // each epoch reshuffles
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(SampleStream, StatelessInPosition) {
  // Any access order gives the same sample per position, across epoch boundaries.
  const SampleStream s(iota_tokens(1001), 10, 3);
  const std::vector<uint64_t> forward = order(s, 0, 350);
  const SampleStream fresh(iota_tokens(1001), 10, 3);
  for (uint64_t p : {349u, 0u, 199u, 100u, 99u, 250u, 101u, 0u})
    EXPECT_EQ(fresh.sample_index(p), forward[p]) << "position " << p;
  // A rank reading every dp-th position sees its slice of the same stream.
  const uint64_t dp = 4;
  for (uint64_t r = 0; r < dp; ++r)
    for (uint64_t p = r; p < 350; p += dp) ASSERT_EQ(fresh.sample_index(p), forward[p]);
  EXPECT_EQ(SampleStream::epoch_of(99, 100), 0u);
  EXPECT_EQ(SampleStream::epoch_of(100, 100), 1u);
}

TEST(SampleStream, FillUsesTheShuffledSample) {
  const SampleStream s(iota_tokens(1001), 10, 9);
  std::vector<int32_t> in(30), tgt(30);
  s.fill_batch(98, 3, in.data(), tgt.data());  // crosses the epoch boundary at 100
  for (int b = 0; b < 3; ++b) {
    const auto sample = static_cast<int32_t>(s.sample_index(98 + b));
    for (int k = 0; k < 10; ++k) {
      EXPECT_EQ(in[b * 10 + k], sample * 10 + k);
      EXPECT_EQ(tgt[b * 10 + k], sample * 10 + k + 1);
    }
  }
  std::vector<int32_t> one_in(10), one_tgt(10);
  s.fill(99, one_in.data(), one_tgt.data());
  EXPECT_TRUE(std::equal(one_in.begin(), one_in.end(), in.begin() + 10));
}

TEST(SampleStream, MovesWithItsTokens) {
  SampleStream a(iota_tokens(1001), 10, 5);
  const std::vector<uint64_t> before = order(a, 0, 150);
  std::vector<SampleStream> streams;
  streams.push_back(std::move(a));
  EXPECT_EQ(order(streams[0], 0, 150), before);
  EXPECT_EQ(streams[0].tokens().size(), 1001u);
}

TEST(SampleStream, PermutationIsPinned) {
  // The order is part of a run's reproducibility: changing it changes training.
  EXPECT_EQ(SampleStream::epoch_permutation(0, 0, 1), std::vector<uint32_t>{0});
  const auto p = SampleStream::epoch_permutation(1234, 5, 8);
  EXPECT_EQ(std::set<uint32_t>(p.begin(), p.end()).size(), 8u);
  EXPECT_EQ(p, SampleStream::epoch_permutation(1234, 5, 8));
  EXPECT_NE(p, SampleStream::epoch_permutation(1234, 6, 8));
}

}  // namespace
}  // namespace kiri::data
