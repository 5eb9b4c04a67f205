#include "kiri/data/shard.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include "data/test_util.h"

namespace kiri::data {
namespace {

using testing::expect_error;
using Ids = std::vector<int32_t>;

TEST(Shard, RoundTripsNarrowAndWideTokens) {
  testing::TempDir dir;
  const Ids narrow = {0, 1, 50256, 65535, 7};
  write_shard(dir.file("a.bin"), "gpt2", 65536, narrow);
  const TokenShard a = read_shard(dir.file("a.bin"));
  EXPECT_EQ(a.tokens, narrow);
  EXPECT_EQ(a.header.tokenizer, "gpt2");
  EXPECT_EQ(a.header.vocab_size, 65536u);
  EXPECT_EQ(a.header.token_width, 2u);
  EXPECT_EQ(a.header.token_count, 5u);
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 64u + 5 * 2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.bin.tmp")));

  const Ids wide = {0, 65536, 100000, 3};
  write_shard(dir.file("b.bin"), "big", 100001, wide);
  const TokenShard b = read_shard(dir.file("b.bin"));
  EXPECT_EQ(b.tokens, wide);
  EXPECT_EQ(b.header.token_width, 4u);
  EXPECT_EQ(read_shard_header(dir.file("b.bin")).token_count, 4u);

  write_shard(dir.file("empty.bin"), "byte", 256, Ids{});
  EXPECT_TRUE(read_shard(dir.file("empty.bin")).tokens.empty());
}

TEST(Shard, HeaderLayoutIsAsDocumented) {
  testing::TempDir dir;
  write_shard(dir.file("s.bin"), "byte", 256, Ids{0x41, 0x102 & 0xff});
  const std::string bytes = testing::read_text(dir.file("s.bin"));
  ASSERT_EQ(bytes.size(), 68u);
  EXPECT_EQ(bytes.substr(0, 8), "KIRITOK1");
  EXPECT_EQ(bytes[8], 1);                                    // version
  EXPECT_EQ(bytes.substr(12, 5), std::string("byte\0", 5));  // name, NUL padded
  EXPECT_EQ(static_cast<unsigned char>(bytes[29]), 1);       // vocab 256 = 0x100, LE
  EXPECT_EQ(bytes[32], 2);                                   // width
  EXPECT_EQ(bytes[40], 2);                                   // count
  EXPECT_EQ(bytes.substr(64), std::string("\x41\x00\x02\x00", 4));
  const auto* payload = reinterpret_cast<const unsigned char*>(bytes.data() + 64);
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i)
    sum |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[48 + i])) << (8 * i);
  EXPECT_EQ(sum, fnv1a64({payload, 4}));
}

TEST(Shard, WriteRefusesBadInput) {
  testing::TempDir dir;
  const std::string path = dir.file("s.bin");
  expect_error(
      [&] {
        write_shard(path, "byte", 256, Ids{3, 256});
      },
      ErrorKind::kInvalidArgument, {"256", "position 1", path});
  expect_error([&] { write_shard(path, "a-very-long-tokenizer", 256, Ids{1}); },
               ErrorKind::kInvalidArgument, {"a-very-long-tokenizer"});
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

class ShardRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    write_shard(path, "byte", 256, Ids{10, 20, 30, 40});
    bytes = testing::read_text(path);
  }
  // Writes the shard back with a change and expects read_shard to refuse it.
  void expect_refused(const std::string& changed, std::initializer_list<std::string> needles) {
    testing::write_text(path, changed);
    expect_error([&] { read_shard(path); }, ErrorKind::kData, needles);
    expect_error([&] { read_shard(path); }, ErrorKind::kData, {path});
  }
  testing::TempDir dir;
  std::string path = dir.file("s.bin");
  std::string bytes;
};

TEST_F(ShardRefusal, Missing) {
  expect_error([&] { read_shard(dir.file("nope.bin")); }, ErrorKind::kData, {"nope.bin"});
  expect_error([&] { read_shard_header(dir.file("nope.bin")); }, ErrorKind::kData, {"nope.bin"});
}

TEST_F(ShardRefusal, BadMagic) {
  std::string b = bytes;
  b[3] = 'X';
  expect_refused(b, {"magic"});
}

TEST_F(ShardRefusal, BadVersion) {
  std::string b = bytes;
  b[8] = 9;
  expect_refused(b, {"version 9"});
}

TEST_F(ShardRefusal, ShorterThanHeader) {
  expect_refused(bytes.substr(0, 40), {"truncated", "40 bytes"});
  expect_error([&] { read_shard_header(path); }, ErrorKind::kData, {"truncated", path});
}

TEST_F(ShardRefusal, TruncatedPayload) {
  expect_refused(bytes.substr(0, 64 + 5), {"truncated", "4 tokens", "5 payload bytes"});
}

TEST_F(ShardRefusal, WrongCount) {
  std::string b = bytes;
  b[40] = 3;  // the header claims 3 tokens, the file holds 4
  expect_refused(b, {"wrong token count", "3 tokens", "8 payload bytes"});
}

TEST_F(ShardRefusal, ChecksumMismatch) {
  std::string b = bytes;
  b[66] ^= 1;
  expect_refused(b, {"checksum"});
}

TEST_F(ShardRefusal, TokenNotBelowVocab) {
  // A valid checksum over a payload holding 300 with vocab 256.
  std::string b = bytes;
  b[66] = static_cast<char>(300 & 0xff);
  b[67] = static_cast<char>(300 >> 8);
  const uint64_t sum =
      fnv1a64({reinterpret_cast<const unsigned char*>(b.data() + 64), b.size() - 64});
  for (int i = 0; i < 8; ++i) b[48 + i] = static_cast<char>(sum >> (8 * i));
  expect_refused(b, {"token 300", "position 1", "vocab size 256"});
}

TEST_F(ShardRefusal, WidthDisagreesWithVocab) {
  std::string b = bytes;
  b[32] = 4;
  expect_refused(b, {"token width 4", "vocab size 256"});
}

// A FIFO as a shard used to block read_shard_header's open() forever (issue 12): both
// readers refuse it by name, at once.
TEST_F(ShardRefusal, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir.file("fifo.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  expect_error([&] { read_shard_header(fifo); }, ErrorKind::kData, {fifo, "FIFO"});
  expect_error([&] { read_shard(fifo); }, ErrorKind::kData, {fifo, "FIFO"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ShardRefusal, DirectoryIsRefused) {
  expect_error([&] { read_shard_header(dir.str()); }, ErrorKind::kData, {"directory"});
  expect_error([&] { read_shard(dir.str()); }, ErrorKind::kData, {"directory"});
}

// parse_shard is read_shard over bytes in memory (the fuzz target's entry point).
TEST_F(ShardRefusal, ParseFromBytesMatchesTheFile) {
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  const TokenShard shard = parse_shard({b, bytes.size()}, "mem");
  EXPECT_EQ(shard.tokens, (Ids{10, 20, 30, 40}));
  EXPECT_EQ(shard.header.tokenizer, "byte");
  expect_error(
      [&] {
        parse_shard({b, 63}, "mem");
      },
      ErrorKind::kData, {"mem", "63 bytes", "64-byte header"});
  expect_error(
      [&] {
        parse_shard({b, bytes.size() - 1}, "mem");
      },
      ErrorKind::kData, {"mem", "truncated"});
}

}  // namespace
}  // namespace kiri::data
