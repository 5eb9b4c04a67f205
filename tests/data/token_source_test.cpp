#include "kiri/data/token_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "data/test_util.h"
#include "kiri/data/dataset.h"
#include "kiri/data/sample_stream.h"
#include "kiri/data/shard.h"

namespace kiri::data {
namespace {

using testing::expect_error;
using Ids = std::vector<int32_t>;

std::string u16_bytes(const Ids& ids) {
  std::string b(ids.size() * 2, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    b[2 * i] = static_cast<char>(ids[i] & 0xff);
    b[2 * i + 1] = static_cast<char>(ids[i] >> 8);
  }
  return b;
}

// llm.c's layout: 256 int32 (magic, version, count, zeros), then uint16 tokens.
std::string llmc_bytes(const Ids& ids, int32_t version = 1, int64_t count = -1) {
  std::vector<int32_t> h(256, 0);
  h[0] = kLlmcMagic;
  h[1] = version;
  h[2] = static_cast<int32_t>(count < 0 ? static_cast<int64_t>(ids.size()) : count);
  std::string b(reinterpret_cast<const char*>(h.data()), 1024);
  return b + u16_bytes(ids);
}

Ids iota(size_t n, int mod) {
  Ids v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7 + 3) % mod);
  return v;
}

TEST(TokenSource, MapsKiriShardsOfBothWidths) {
  testing::TempDir dir;
  const Ids small = iota(1000, 257), big = iota(1000, 70000);
  write_shard(dir.file("a.bin"), "byte", 257, small);
  write_shard(dir.file("b.bin"), "big", 70000, big);
  const TokenSource a = TokenSource::open_file(dir.file("a.bin"));
  const TokenSource b = TokenSource::open_file(dir.file("b.bin"));
  EXPECT_EQ(a.segments()[0].format, TokenFormat::kKiri);
  EXPECT_EQ(a.segments()[0].width, 2u);
  EXPECT_EQ(b.segments()[0].width, 4u);
  EXPECT_EQ(a.segments()[0].tokenizer, "byte");
  Ids got(1000);
  a.read(0, 1000, got.data());
  EXPECT_EQ(got, small);
  b.read(0, 1000, got.data());
  EXPECT_EQ(got, big);
  a.verify(257);
  b.verify(70000);
  EXPECT_EQ(b.max_token(), *std::max_element(big.begin(), big.end()));
}

TEST(TokenSource, DetectsLlmcAndNanoGptFromTheBytesNotTheName) {
  testing::TempDir dir;
  const Ids ids = iota(300, 50257);
  testing::write_text(dir.file("x.txt"), llmc_bytes(ids));  // the name says nothing
  testing::write_text(dir.file("y.dat"), u16_bytes(ids));
  const TokenSource l = TokenSource::open_file(dir.file("x.txt"));
  const TokenSource n = TokenSource::open_file(dir.file("y.dat"));
  EXPECT_EQ(l.segments()[0].format, TokenFormat::kLlmc);
  EXPECT_EQ(n.segments()[0].format, TokenFormat::kNanoGpt);
  ASSERT_EQ(l.size(), 300u);
  ASSERT_EQ(n.size(), 300u);
  for (uint64_t i = 0; i < 300; ++i) {
    EXPECT_EQ(l.at(i), ids[i]);
    EXPECT_EQ(n.at(i), ids[i]);
  }
}

TEST(TokenSource, RefusesHeadersThatDoNotFitTheFile) {
  testing::TempDir dir;
  const Ids ids = iota(10, 256);
  testing::write_text(dir.file("count.bin"), llmc_bytes(ids, 1, 11));
  expect_error([&] { TokenSource::open_file(dir.file("count.bin")); }, ErrorKind::kData,
               {"count.bin", "llm.c", "11 tokens", "20"});
  testing::write_text(dir.file("version.bin"), llmc_bytes(ids, 2));
  expect_error([&] { TokenSource::open_file(dir.file("version.bin")); }, ErrorKind::kData,
               {"version.bin", "version 2"});
  testing::write_text(dir.file("odd.bin"), u16_bytes(ids) + "x");
  expect_error([&] { TokenSource::open_file(dir.file("odd.bin")); }, ErrorKind::kData,
               {"odd.bin", "odd size", "21 bytes"});
  write_shard(dir.file("k.bin"), "byte", 257, ids);
  std::string k = testing::read_text(dir.file("k.bin"));
  testing::write_text(dir.file("k.bin"), k.substr(0, k.size() - 2));
  expect_error([&] { TokenSource::open_file(dir.file("k.bin")); }, ErrorKind::kData,
               {"k.bin", "truncated"});
  expect_error([&] { TokenSource::open_file(dir.file("missing.bin")); }, ErrorKind::kData,
               {"missing.bin"});
}

TEST(TokenSource, VerifyNamesABadChecksumAndATokenOutsideTheVocab) {
  testing::TempDir dir;
  write_shard(dir.file("k.bin"), "byte", 257, iota(100, 256));
  std::string k = testing::read_text(dir.file("k.bin"));
  k[kShardHeaderBytes + 11] ^= 1;
  testing::write_text(dir.file("k.bin"), k);
  const TokenSource bad = TokenSource::open_file(dir.file("k.bin"));  // the header is fine
  expect_error([&] { bad.verify(257); }, ErrorKind::kData, {"k.bin", "checksum"});
  Ids ids = iota(100, 256);
  ids[42] = 300;
  testing::write_text(dir.file("n.bin"), u16_bytes(ids));
  const TokenSource n = TokenSource::open_file(dir.file("n.bin"));
  expect_error([&] { n.verify(257); }, ErrorKind::kData,
               {"n.bin", "nanoGPT", "token 300", "position 42", "vocab size 257"});
  n.verify(301);
}

// The stream over mapped tokens, split over several files, is the stream over the same
// tokens in memory: bitwise, across epochs.
TEST(TokenSource, MappedStreamEqualsTheInMemoryStream) {
  testing::TempDir dir;
  const Ids all = iota(2001, 257);
  write_shard(dir.file("a.bin"), "byte", 257, std::span(all).first(700));
  testing::write_text(dir.file("b.bin"), u16_bytes(Ids(all.begin() + 700, all.begin() + 1500)));
  testing::write_text(dir.file("c.bin"), llmc_bytes(Ids(all.begin() + 1500, all.end())));
  TokenSource mapped = TokenSource::open_file(dir.file("a.bin"));
  mapped.append(TokenSource::open_file(dir.file("b.bin")));
  mapped.append(TokenSource::open_file(dir.file("c.bin")));
  ASSERT_EQ(mapped.size(), all.size());
  const SampleStream ref(all, 16, 7), got(std::move(mapped), 16, 7);
  ASSERT_EQ(got.num_samples(), ref.num_samples());
  Ids x1(16), y1(16), x2(16), y2(16);
  for (uint64_t p = 0; p < 3 * ref.num_samples(); p += 5) {
    ref.fill(p, x1.data(), y1.data());
    got.fill(p, x2.data(), y2.data());
    ASSERT_EQ(x1, x2) << p;
    ASSERT_EQ(y1, y2) << p;
  }
}

// What the trainer reads: rank r of dp takes rows [r * rows, (r + 1) * rows) of each global
// batch. The ranks' rows together are the one-rank batch for dp 1, 2 and 4, and a stream
// opened again at a saved position (a resume) continues it exactly.
TEST(TokenSource, GlobalBatchesAreTheSameAcrossRanksAndAResume) {
  testing::TempDir dir;
  testing::write_text(dir.file("train.bin"), u16_bytes(iota(5000, 257)));
  const int64_t T = 8, global = 8;
  auto batch = [&](const SampleStream& s, uint64_t position, int dp) {
    Ids x(global * T), y(global * T);
    const int64_t rows = global / dp;
    for (int r = 0; r < dp; ++r)
      s.fill_batch(position + static_cast<uint64_t>(r * rows), rows, x.data() + r * rows * T,
                   y.data() + r * rows * T);
    return std::make_pair(x, y);
  };
  const SampleStream one(TokenSource::open_file(dir.file("train.bin")), T, 99);
  for (int dp : {2, 4}) {
    const SampleStream s(TokenSource::open_file(dir.file("train.bin")), T, 99);
    for (uint64_t step = 0; step < 200; ++step)  // over three epochs of 624 samples
      ASSERT_EQ(batch(s, step * global, dp), batch(one, step * global, 1)) << dp << " " << step;
  }
  const SampleStream resumed(TokenSource::open_file(dir.file("train.bin")), T, 99);
  for (uint64_t step = 77; step < 90; ++step)
    ASSERT_EQ(batch(resumed, step * global, 2), batch(one, step * global, 1));
}

}  // namespace
}  // namespace kiri::data
