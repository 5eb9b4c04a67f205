#include "kiri/data/tokenizer.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "data/test_util.h"
#include "kiri/base/timer.h"
#include "kiri/data/gpt2_tokenizer.h"
#include "test_paths.h"

namespace kiri::data {
namespace {

using testing::expect_error;
using testing::gpt2;
using Ids = std::vector<int32_t>;

TEST(ByteTokenizer, IsIdentityOnBytes) {
  auto tok = make_tokenizer("byte", KIRI_TEST_DATA_DIR);
  EXPECT_EQ(tok->name(), "byte");
  EXPECT_EQ(tok->vocab_size(), 257);  // 256 bytes and the end-of-text token
  EXPECT_EQ(tok->eot_token(), 256);
  const std::string text("a\0\xff\n", 4);
  EXPECT_EQ(tok->encode(text), (Ids{97, 0, 255, 10}));
  const Ids ids = tok->encode(text);
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->decode(Ids{97, 256, 98}), "a<|endoftext|>b");
  expect_error([&] { tok->decode(Ids{1, 257}); }, ErrorKind::kInvalidArgument, {"257", "[0, 257)"});
}

TEST(MakeTokenizer, RefusesUnknownNameAndMissingFiles) {
  expect_error([] { make_tokenizer("wordpiece", KIRI_TEST_DATA_DIR); }, ErrorKind::kConfig,
               {"wordpiece", "byte", "gpt2"});
  expect_error([] { make_tokenizer("gpt2", "/nonexistent/kiri"); }, ErrorKind::kData,
               {"/nonexistent/kiri/gpt2/encoder.json"});
}

TEST(Gpt2Tokenizer, RefusesMalformedFiles) {
  testing::TempDir dir;
  const std::string enc = dir.file("encoder.json"), bpe = dir.file("vocab.bpe");
  const std::string real_bpe = std::string(KIRI_TEST_DATA_DIR) + "/gpt2/vocab.bpe";
  testing::write_text(enc, "{\"a\": 0,");
  expect_error([&] { Gpt2Tokenizer(enc, real_bpe); }, ErrorKind::kData, {enc, "JSON"});
  testing::write_text(enc, "{\"a\": 0, \"b\": 5}");
  expect_error([&] { Gpt2Tokenizer(enc, real_bpe); }, ErrorKind::kData, {enc, "'b'", "5"});
  testing::write_text(enc, "{\"a\": 0}");  // lacks the other 255 bytes
  expect_error([&] { Gpt2Tokenizer(enc, real_bpe); }, ErrorKind::kData, {enc, "byte"});

  const std::string real_enc = std::string(KIRI_TEST_DATA_DIR) + "/gpt2/encoder.json";
  testing::write_text(bpe, "#version: 0.2\nĠ t\nĠt he he\n");
  expect_error([&] { Gpt2Tokenizer(real_enc, bpe); }, ErrorKind::kData, {bpe, "line 3"});
  testing::write_text(bpe, "#version: 0.2\nĠ t\nĠ zzzq\n");
  expect_error([&] { Gpt2Tokenizer(real_enc, bpe); }, ErrorKind::kData, {bpe, "line 3", "zzzq"});
  testing::write_text(bpe, "#version: 0.2\nĠt he\n");  // "Ġt" is made by no earlier merge
  expect_error([&] { Gpt2Tokenizer(real_enc, bpe); }, ErrorKind::kData, {bpe, "line 2"});
}

TEST(Gpt2Tokenizer, LoadsGpt2Vocabulary) {
  auto tok = make_tokenizer("gpt2", KIRI_TEST_DATA_DIR);
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eot_token(), 50256);
  EXPECT_EQ(tok->decode(Ids{50256}), "<|endoftext|>");
  expect_error([&] { tok->decode(Ids{50257}); }, ErrorKind::kInvalidArgument, {"50257"});
  expect_error([&] { tok->decode(Ids{-1}); }, ErrorKind::kInvalidArgument, {"-1"});
}

TEST(Gpt2Tokenizer, BytesToUnicodeIsGpt2s) {
  const auto map = gpt2_bytes_to_unicode();
  EXPECT_EQ(map['A'], U'A');
  EXPECT_EQ(map[' '], U'\u0120');   // the familiar "Ġ"
  EXPECT_EQ(map['\n'], U'\u010A');  // "Ċ"
  EXPECT_EQ(map[0], U'\u0100');
  EXPECT_EQ(map[0xAD], U'\u0143');  // the last non-printable byte
}

// Ids from OpenAI's encoder.py (GPT-2) for the same strings.
TEST(Gpt2Tokenizer, MatchesGpt2Ids) {
  const auto& tok = gpt2();
  EXPECT_EQ(tok.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok.encode(" the"), (Ids{262}));
  EXPECT_EQ(tok.encode("\n"), (Ids{198}));
  EXPECT_EQ(tok.encode("Hello, world!"), (Ids{15496, 11, 995, 0}));
  EXPECT_EQ(tok.encode("It's a test: 1234567 apples."),
            (Ids{1026, 338, 257, 1332, 25, 17031, 2231, 3134, 22514, 13}));
  EXPECT_EQ(tok.encode("  multiple   spaces\n\n\ttab"),
            (Ids{220, 3294, 220, 220, 9029, 628, 197, 8658}));
  EXPECT_EQ(tok.encode("I'll we've they're don't"), (Ids{40, 1183, 356, 1053, 484, 821, 836, 470}));
  EXPECT_EQ(tok.encode("naïve café — 日本語 😀"),
            (Ids{2616, 38776, 40304, 851, 10545, 245, 98, 17312, 105, 45739, 252, 30325, 222}));
  EXPECT_EQ(tok.encode("\u00a0x\u2003y"), (Ids{1849, 87, 447, 225, 88}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Gpt2Tokenizer, PretokenizesLikeGpt2) {
  const auto& tok = gpt2();
  const std::string text = "He said: 'I've 42 cats'  \n\nok";
  std::vector<std::string> pieces;
  for (auto [offset, length] : tok.pretokenize(text)) pieces.push_back(text.substr(offset, length));
  EXPECT_EQ(pieces, (std::vector<std::string>{"He", " said", ":", " '", "I", "'ve", " 42", " cats",
                                              "'", "  \n", "\n", "ok"}));
}

TEST(Gpt2Tokenizer, SurvivesInvalidUtf8) {
  const auto& tok = gpt2();
  const std::string text = "Hello\xff world \xc3\x28 \xe2\x82 end\x80\xbf\xc3";
  Ids ids;
  ASSERT_NO_THROW(ids = tok.encode(text));
  EXPECT_EQ(tok.decode(ids), text);
  // The valid text around the bad bytes is encoded as usual.
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 15496);
  size_t covered = 0;
  for (auto [offset, length] : tok.pretokenize(text)) {
    EXPECT_EQ(offset, covered);
    covered += length;
  }
  EXPECT_EQ(covered, text.size());
  const std::string bad(1000, '\xfe');
  EXPECT_EQ(tok.decode(tok.encode(bad)), bad);
}

TEST(Gpt2Tokenizer, LongPiecesStayFast) {
  // One 200 KB pre-token (a letter run) and one whitespace run: O(n log n) BPE.
  const auto& tok = gpt2();
  const std::string letters(200000, 'a'), spaces(200000, ' ');
  Timer timer;
  EXPECT_EQ(tok.decode(tok.encode(letters)), letters);
  EXPECT_EQ(tok.decode(tok.encode(spaces + "x")), spaces + "x");
  EXPECT_LT(timer.seconds(), 5.0);
}

// Moby Dick: byte-exact round trip, and the exact ids of encoder.py (their
// count and an FNV-1a hash of their little-endian u32 bytes).
TEST(Gpt2Tokenizer, EncodesMobyDickExactlyAndFast) {
  const auto& tok = gpt2();
  const std::string text = testing::read_text(std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt");
  ASSERT_EQ(text.size(), 1220986u);
  Timer timer;
  const Ids ids = tok.encode(text);
  const double seconds = timer.seconds();
  std::printf("encoded %zu bytes into %zu tokens in %.3f s\n", text.size(), ids.size(), seconds);
  ASSERT_EQ(ids.size(), 295189u);
  EXPECT_EQ((Ids(ids.begin(), ids.begin() + 4)), (Ids{37815, 15365, 628, 198}));
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k)
      h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 255)) * 0x100000001b3ull;
  EXPECT_EQ(h, 0x6c95b1ed3b95496cull);
  EXPECT_TRUE(tok.decode(ids) == text);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(seconds, 3.0);  // ~1-2 s is the budget; leave room for a loaded machine
#endif
}

TEST(Gpt2Tokenizer, ResultDoesNotDependOnThreadCount) {
  const auto& tok = gpt2();
  const std::string text =
      testing::read_text(std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt").substr(0, 300000);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Ids one = tok.encode(text);
  omp_set_num_threads(4);
  const Ids four = tok.encode(text);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, four);
}

}  // namespace
}  // namespace kiri::data
