// kiri's tokenizers against the outside encoders themselves, run with Node
// (benchmarks/tokenizer_js.mjs): @lenml/tokenizers (a JavaScript port of Hugging
// Face's tokenizers) with Llama 3's tokenizer.json, and gpt-3-encoder with
// GPT-2's files, on hostile strings and on the whole of Moby-Dick.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "data/test_util.h"
#include "kiri/data/tokenizer.h"
#include "test_paths.h"

namespace kiri::data {
namespace {

using Ids = std::vector<int32_t>;
const std::string kData = KIRI_TEST_DATA_DIR;

// JavaScript strings hold UTF-16, so only valid UTF-8 is comparable (Node reads
// invalid bytes as U+FFFD; kiri keeps them: tokenizer_hf_test checks those
// round-trip). None may hold a NUL, the separator.
std::vector<std::string> hostile() {
  return {
      "",
      "Hello world, call me Ishmael.",
      "<|begin_of_text|>Hello<|end_of_text|>",
      "<|end_of_text|><|end_of_text|> <|eot_id|>\n<|eot_id|>",
      "a<|reserved_special_token_5|>b<|end_of_text",
      "<<|eot_id|>> <|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
      "<|endoftext|> and <|endoftext",
      "1234567890 3.14159 2,000,000 0x1F 1e10 007",
      "\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xc2\xbd \xc2\xb2 \xe2\x85\xab",  // ١٢٣٤ ½ ² Ⅻ
      "日本語のテキストです。中文文本，包含标点。한국어 텍스트",
      "😀👍🏽 👨‍👩‍👧‍👦 🇯🇵 ❤️ 🤖🤖🤖",
      "a" + std::string(40, ' ') + "b" + std::string(7, ' '),
      "\t\t\n\n\r\n  \n   leading and trailing   ",
      "\xc2\xa0x\xe2\x80\x83y\xe3\x80\x80z",  // no-break, em and ideographic spaces
      "line\r\nbreak\rcr\n\n\n",
      "I'LL DON'T we'Re it's O'Neil's 'tis ’s",
      "naïve café — Ελληνικά кириллица עברית العربية हिन्दी",
      "\x01\x02\x7f \xe2\x80\x8b zero width \xef\xbb\xbf bom \xef\xbf\xbd",
      "a\xc2\x85"
      "b",  // U+0085, NEXT LINE
      "e\xcc\x81 a\xcc\x88 \xe1\x84\x80\xe1\x85\xa1",
      std::string(5000, 'a'),
      std::string(3000, '!') + "??" + std::string(300, '\n'),
  };
}

bool have_node() {
  return std::system("command -v node > /dev/null 2>&1") == 0;
}

// Runs benchmarks/tokenizer_js.mjs on the texts; one id list per text.
std::vector<Ids> run_js(const testing::TempDir& dir, const std::string& tarball,
                        const std::string& args, const std::vector<std::string>& texts) {
  const std::string tgz = kData + "/npm/" + tarball;
  if (!std::filesystem::exists(tgz)) {
    ADD_FAILURE() << tgz << " is missing: run scripts/bootstrap.sh";
    return {};
  }
  std::string joined;
  for (size_t i = 0; i < texts.size(); ++i) joined += (i ? std::string(1, '\0') : "") + texts[i];
  testing::write_text(dir.file("in.txt"), joined);
  const std::string cmd = "tar -xzf '" + tgz + "' -C '" + dir.str() + "' && node '" +
                          KIRI_SOURCE_DIR + "/benchmarks/tokenizer_js.mjs' " + args + " '" +
                          dir.file("in.txt") + "' '" + dir.file("out.bin") + "' > /dev/null";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "failed: " << cmd;
    return {};
  }
  const std::string out = testing::read_text(dir.file("out.bin"));
  std::vector<Ids> all;
  auto word = [&](size_t at) {
    uint32_t w;
    std::memcpy(&w, out.data() + 4 * at, 4);
    return w;
  };
  for (size_t at = 0; at < out.size() / 4;) {
    const uint32_t n = word(at++);
    Ids ids(n);
    for (uint32_t k = 0; k < n; ++k) ids[k] = static_cast<int32_t>(word(at++));
    all.push_back(std::move(ids));
  }
  EXPECT_EQ(all.size(), texts.size());
  return all;
}

TEST(TokenizerReference, Llama3MatchesLenmlTokenizers) {
  if (!have_node()) GTEST_SKIP() << "node is not installed (tokenizer_hf_test pins its ids)";
  testing::TempDir dir;
  auto texts = hostile();
  texts.push_back(testing::read_text(kData + "/moby-dick.txt"));
  const std::string l3 = kData + "/llama3";
  const auto want = run_js(dir, "lenml-tokenizers-3.7.2.tgz",
                           "lenml '" + dir.str() + "/package' '" + l3 + "/tokenizer.json' '" + l3 +
                               "/tokenizer_config.json'",
                           texts);
  ASSERT_EQ(want.size(), texts.size());
  EXPECT_EQ(want[1], (Ids{9906, 1917, 11, 1650, 757, 57704, 1764, 301, 13}));  // its README's
  const auto tok = make_tokenizer(l3, "");
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": " + texts[i].substr(0, 60));
    const Ids ids = tok->encode(texts[i]);
    EXPECT_EQ(ids, want[i]);
    EXPECT_EQ(tok->decode(ids), texts[i]);
  }
  EXPECT_EQ(want.back().size(), 287423u);
}

TEST(TokenizerReference, Gpt2MatchesGpt3Encoder) {
  if (!have_node()) GTEST_SKIP() << "node is not installed (tokenizer_test pins its ids)";
  testing::TempDir dir;
  // gpt-3-encoder is slow on one long text (minutes for Moby-Dick): its first
  // chapters only; tokenizer_test pins the whole book's ids.
  auto texts = hostile();
  texts.push_back(testing::read_text(kData + "/moby-dick.txt").substr(0, 50000));
  const auto want =
      run_js(dir, "gpt-3-encoder-1.1.4.tgz", "gpt3 '" + dir.str() + "/package'", texts);
  ASSERT_EQ(want.size(), texts.size());
  EXPECT_EQ((Ids(want[1].begin(), want[1].begin() + 2)), (Ids{15496, 995}));  // "Hello world"
  const auto& tok = testing::gpt2();
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE("text " + std::to_string(i) + ": " + texts[i].substr(0, 60));
    EXPECT_EQ(tok.encode(texts[i]), want[i]);
  }
}

}  // namespace
}  // namespace kiri::data
