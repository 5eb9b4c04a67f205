// Hugging Face tokenizer files: vocab.json + merges.txt, and tokenizer.json
// (Llama 3's real one, and GPT-2's written as one), against the ids of outside
// encoders: gpt-3-encoder / encoder.py for GPT-2, @lenml/tokenizers for Llama 3.
#include <gtest/gtest.h>
#include <omp.h>

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/test_util.h"
#include "kiri/base/timer.h"
#include "kiri/data/hf_tokenizer.h"
#include "kiri/data/tokenizer.h"
#include "test_paths.h"

namespace kiri::data {
namespace {

using nlohmann::json;
using testing::expect_error;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

const std::string kData = KIRI_TEST_DATA_DIR;
const std::string kLlama3 = kData + "/llama3";

// The count and an FNV-1a hash of the ids' little-endian u32 bytes.
std::pair<size_t, uint64_t> fingerprint(const Ids& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k)
      h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 255)) * 0x100000001b3ull;
  return {ids.size(), h};
}

const Tokenizer& llama3() {
  static const auto tokenizer = make_tokenizer(kLlama3, "");
  return *tokenizer;
}

TEST(HfTokenizer, VocabJsonAndMergesTxtGiveGpt2IdsOnMobyDick) {
  testing::TempDir dir;
  fs::copy_file(kData + "/gpt2/encoder.json", dir.file("vocab.json"));
  fs::copy_file(kData + "/gpt2/vocab.bpe", dir.file("merges.txt"));
  const auto tok = make_tokenizer(dir.str(), "");
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eot_token(), 50256);
  EXPECT_EQ(tok->name().size(), 11u);
  EXPECT_EQ(tok->name().substr(0, 3), "hf-");
  ASSERT_EQ(tok->files().size(), 2u);
  EXPECT_EQ(tok->files()[0].hf_name, "vocab.json");
  EXPECT_EQ(tok->files()[1].hf_name, "merges.txt");
  const std::string text = testing::read_text(kData + "/moby-dick.txt");
  const Ids ids = tok->encode(text);
  // encoder.py's and gpt-3-encoder's ids (the same pin as the gpt2 tokenizer's test).
  EXPECT_EQ(fingerprint(ids), std::make_pair(size_t{295189}, uint64_t{0x6c95b1ed3b95496cull}));
  EXPECT_TRUE(tok->decode(ids) == text);
  // As transformers' GPT2Tokenizer: <|endoftext|> in text is the special token;
  // the gpt2 tokenizer (OpenAI's encoder) spells it out.
  EXPECT_EQ(tok->encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  EXPECT_EQ(testing::gpt2().encode("a<|endoftext|>b").size(), 9u);
}

TEST(HfTokenizer, Llama3TokenizerJson) {
  const auto& tok = llama3();
  EXPECT_EQ(tok.vocab_size(), 128256);
  EXPECT_EQ(tok.eot_token(), 128001);  // tokenizer_config.json's eos_token <|end_of_text|>
  EXPECT_EQ(dynamic_cast<const HfTokenizer&>(tok).bos_token(), 128000);
  EXPECT_EQ(tok.decode(Ids{128001}), "<|end_of_text|>");
  // @lenml/tokenizers' README example.
  EXPECT_EQ(tok.encode("Hello world, call me Ishmael."),
            (Ids{9906, 1917, 11, 1650, 757, 57704, 1764, 301, 13}));
  EXPECT_EQ(tok.encode("<|begin_of_text|>Hi<|end_of_text|>"), (Ids{128000, 13347, 128001}));
  const auto files = tok.files();
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].hf_name, "tokenizer.json");
  EXPECT_EQ(files[1].hf_name, "tokenizer_config.json");
  EXPECT_EQ(files[0].path, fs::path(kLlama3 + "/tokenizer.json").lexically_normal().string());
  // The file itself reads the config beside it: the same tokenizer, the same name.
  const auto same = make_tokenizer(kLlama3 + "/tokenizer.json", "");
  EXPECT_EQ(same->name(), tok.name());
  EXPECT_NE(tok.name(), make_tokenizer("gpt2", kData)->name());
  expect_error([&] { tok.decode(Ids{128256}); }, ErrorKind::kInvalidArgument, {"128256"});
}

TEST(HfTokenizer, Llama3EncodesMobyDickAsLenmlTokenizers) {
  const auto& tok = llama3();
  const std::string text = testing::read_text(kData + "/moby-dick.txt");
  Timer timer;
  const Ids ids = tok.encode(text);
  std::printf("llama3: %zu bytes -> %zu tokens in %.3f s\n", text.size(), ids.size(),
              timer.seconds());
  // @lenml/tokenizers 3.7.2: encode(text, {add_special_tokens: false}) on the whole file.
  EXPECT_EQ(fingerprint(ids), std::make_pair(size_t{287423}, uint64_t{0xe004d42fbb43902full}));
  EXPECT_EQ((Ids(ids.begin(), ids.begin() + 4)), (Ids{24194, 44978, 1432, 69484}));
  EXPECT_TRUE(tok.decode(ids) == text);
  // The ids do not depend on the thread count.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Ids one = tok.encode(text);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, ids);
}

TEST(HfTokenizer, InvalidUtf8RoundTrips) {
  const auto& tok = llama3();
  for (const std::string& text :
       {std::string("Hello\xff world \xc3\x28 \xe2\x82 end\x80\xbf\xc3"), std::string(1000, '\xfe'),
        std::string("<|end_of_text\xff|>\xed\xa0\x80")}) {
    Ids ids;
    ASSERT_NO_THROW(ids = tok.encode(text));
    EXPECT_EQ(tok.decode(ids), text);
  }
  EXPECT_EQ(tok.encode("Hello\xff")[0], 9906);  // the valid text is encoded as usual
}

// GPT-2's files written as a tokenizer.json: the ByteLevel pre-tokenizer's own
// regex, merges as "a b" strings or as pairs; the same ids as encoder.py.
TEST(HfTokenizer, Gpt2AsTokenizerJson) {
  const std::string vocab_text = testing::read_text(kData + "/gpt2/encoder.json");
  const std::string bpe = testing::read_text(kData + "/gpt2/vocab.bpe");
  json merges = json::array(), pairs = json::array();
  for (size_t pos = bpe.find('\n') + 1; pos < bpe.size();) {
    const size_t end = bpe.find('\n', pos);
    const std::string line = bpe.substr(pos, end - pos);
    pos = end == std::string::npos ? bpe.size() : end + 1;
    if (line.empty()) continue;
    merges.push_back(line);
    pairs.push_back({line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)});
  }
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens",
             {{{"id", 50256},
               {"content", "<|endoftext|>"},
               {"single_word", false},
               {"lstrip", false},
               {"rstrip", false},
               {"normalized", true},
               {"special", true}}}},
            {"normalizer", nullptr},
            {"pre_tokenizer",
             {{"type", "ByteLevel"},
              {"add_prefix_space", false},
              {"trim_offsets", true},
              {"use_regex", true}}},
            {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
            {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}}},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"vocab", json::parse(vocab_text)},
              {"merges", merges}}}};
  testing::TempDir dir;
  const std::string text = testing::read_text(kData + "/moby-dick.txt");
  for (int form = 0; form < 2; ++form) {
    if (form == 1) j["model"]["merges"] = pairs;
    testing::write_text(dir.file("tokenizer.json"), j.dump());
    const auto tok = make_tokenizer(dir.file("tokenizer.json"), "");
    EXPECT_EQ(tok->eot_token(), 50256);
    EXPECT_EQ(fingerprint(tok->encode(text)),
              std::make_pair(size_t{295189}, uint64_t{0x6c95b1ed3b95496cull}));
  }
}

// The smallest byte-level tokenizer.json: the 256 byte tokens, "ab" (256) made
// by one merge, "xyz" (257) in the vocabulary but made by none.
json tiny() {
  json vocab = json::object();
  const auto unicode = gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    const char32_t c = unicode[b];
    if (c < 0x80) {
      key += static_cast<char>(c);
    } else {
      key += static_cast<char>(0xC0 | (c >> 6));
      key += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[key] = b;
  }
  vocab["ab"] = 256;
  vocab["xyz"] = 257;
  vocab["xy"] = 258;
  return {
      {"added_tokens",
       {{{"id", 259}, {"content", "<x>"}, {"special", true}},
        {{"id", 260}, {"content", "<xy>"}, {"special", true}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", "\\p{L}+|\\p{N}{1,3}|[^\\p{L}\\p{N}]+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "x y"}}, {"ignore_merges", false}}}};
}

std::unique_ptr<Tokenizer> load(const testing::TempDir& dir, const json& j) {
  testing::write_text(dir.file("tokenizer.json"), j.dump());
  return make_tokenizer(dir.str(), "");
}

TEST(HfTokenizer, IgnoreMergesAndAddedTokens) {
  testing::TempDir dir;
  json j = tiny();
  auto tok = load(dir, j);
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_EQ(tok->eot_token(), -1);
  EXPECT_EQ(tok->encode("ab xyz"), (Ids{256, ' ', 258, 'z'}));
  EXPECT_EQ(tok->encode("1234"), (Ids{'1', '2', '3', '4'}));  // \p{N}{1,3}: "123", "4"
  // The longest added token wins; each is one id; the text around is split apart.
  EXPECT_EQ(tok->encode("ab<xy>ab<x>"), (Ids{256, 260, 256, 259}));
  EXPECT_EQ(tok->decode(Ids{256, 260, 259}), "ab<xy><x>");
  j["model"]["ignore_merges"] = true;  // a pre-token in the vocabulary is one token
  tok = load(dir, j);
  EXPECT_EQ(tok->encode("ab xyz"), (Ids{256, ' ', 257}));
  // The name follows the files: a changed vocabulary is another tokenizer.
  const std::string name = tok->name();
  j["model"]["vocab"]["zz"] = 261;
  EXPECT_NE(load(dir, j)->name(), name);
  // tokenizer_config.json names the end of text.
  testing::write_text(dir.file("tokenizer_config.json"), R"({"eos_token": "<xy>"})");
  tok = load(dir, j);
  EXPECT_EQ(tok->eot_token(), 260);
  ASSERT_EQ(tok->files().size(), 2u);
  EXPECT_EQ(tok->files()[1].hf_name, "tokenizer_config.json");
  testing::write_text(dir.file("tokenizer_config.json"), R"({"eos_token": {"content": "</s>"}})");
  expect_error([&] { load(dir, j); }, ErrorKind::kData, {"</s>", "not in the vocabulary"});
}

// Each unsupported setting is named with its value; nothing is silently ignored.
TEST(HfTokenizer, RefusesWhatItDoesNotDo) {
  testing::TempDir dir;
  struct Case {
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "WordPiece"}},
      {[](json& j) { j["model"]["type"] = 7; }, {"model.type", "7"}},
      {[](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       {"normalizer", "NFC"}},
      {[](json& j) {
         j["truncation"] = {{"max_length", 512}};
       },
       {"truncation", "512"}},
      {[](json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       {"pre_tokenizer", "Metaspace"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       {"behavior", "Removed"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; }, {"invert"}},
      {[](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", " "}};
       },
       {"pattern", "String"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
       {"regex", "offset"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "a*"; },
       {"empty string"}},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       {"add_prefix_space"}},
      {[](json& j) { j["decoder"] = nullptr; }, {"decoder", "ByteLevel"}},
      {[](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       {"post_processor", "BertProcessing"}},
      {[](json& j) { j["added_tokens"][0]["lstrip"] = true; }, {"added_tokens[0].lstrip"}},
      {[](json& j) { j["added_tokens"][1]["id"] = 256; }, {"<xy>", "256", "ab"}},
      {[](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout", "0.1"}},
      {[](json& j) { j["model"]["vocab"]["zz"] = 1 << 29; }, {"536870912", "65,536"}},
      {[](json& j) { j["added_tokens"][0]["id"] = 1 << 29; }, {"536870912", "65,536"}},
      {[](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback"}},
      {[](json& j) { j["model"]["frobnicate"] = 1; }, {"model.frobnicate"}},
      {[](json& j) { j["chat"] = 1; }, {"tokenizer.json.chat"}},
      {[](json& j) { j["model"]["merges"].push_back("q zzz"); }, {"model.merges[2]", "zzz"}},
      {[](json& j) { j["model"]["merges"].push_back("a b c"); }, {"model.merges[2]"}},
      {[](json& j) { j["model"]["merges"].push_back("y z"); }, {"model.merges[2]", "yz"}},
      {[](json& j) { j["model"]["vocab"].erase("a"); }, {"byte 97"}},
      {[](json& j) { j["model"]["vocab"]["b"] = 97; }, {"id 97"}},
      {[](json& j) { j["model"]["vocab"]["\xe2\x96\x81"] = 300; }, {"byte-level alphabet"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    json j = tiny();
    cases[i].edit(j);
    std::vector<std::string> needles = cases[i].needles;
    needles.push_back(dir.file("tokenizer.json"));
    try {
      load(dir, j);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
      for (const auto& n : needles)
        EXPECT_NE(e.message().find(n), std::string::npos) << e.message() << " lacks " << n;
    }
  }
  testing::write_text(dir.file("tokenizer.json"), "{\"model\": ");
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData, {"not valid JSON"});
  testing::write_text(dir.file("tokenizer.json"), std::string(100, '[') + std::string(100, ']'));
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData, {"deeper"});
}

// Values of the wrong JSON type are named with their JSON path and value, never read as
// either setting: "yes" is no boolean, an id is no token's text.
TEST(HfTokenizer, RefusesValuesOfTheWrongType) {
  testing::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["model"]["ignore_merges"] = "yes"; },
       ": model.ignore_merges = \"yes\": expected true or false"},
      {[](json& j) { j["model"]["byte_fallback"] = 0; },
       ": model.byte_fallback = 0: expected true or false"},
      {[](json& j) { j["model"]["fuse_unk"] = "no"; },
       ": model.fuse_unk = \"no\": expected true or false"},
      {[](json& j) { j["model"]["unk_token"] = 3; },
       ": model.unk_token = 3: expected a string or null"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "false"; },
       ": pre_tokenizer.pretokenizers[1].use_regex = \"false\": expected true or false"},
      {[](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = 1; },
       ": pre_tokenizer.pretokenizers[0].invert = 1: expected true or false"},
      {[](json& j) { j["added_tokens"][1]["special"] = "true"; },
       ": added_tokens[1].special = \"true\": expected true or false"},
  };
  for (const auto& [edit, message] : cases) {
    json j = tiny();
    edit(j);
    expect_error([&] { load(dir, j); }, ErrorKind::kData, {"tokenizer " + file + message});
  }
  // The config files' special tokens: a string or {"content": ...}; an id is named.
  const json good = tiny();
  const std::string config = dir.file("tokenizer_config.json");
  testing::write_text(config, R"({"eos_token": 260})");
  expect_error([&] { load(dir, good); }, ErrorKind::kData,
               {"tokenizer config " + config +
                ": eos_token = 260: expected a token's text, \"...\", or {\"content\": "
                "\"...\"} (or null)"});
  testing::write_text(config, R"({"additional_special_tokens": ["<x>", {"id": 259}]})");
  expect_error([&] { load(dir, good); }, ErrorKind::kData,
               {"tokenizer config " + config + ": additional_special_tokens[1] = {\"id\":259}"});
  testing::write_text(config, R"({"eos_token": null, "bos_token": {"content": "<x>"}})");
  EXPECT_EQ(load(dir, good)->eot_token(), -1);
}

// A tokenizer file above the reader's limit is refused by name, before it is read (a sparse
// file: no disk used).
TEST(HfTokenizer, RefusesAFileAboveTheLimitByName) {
  testing::TempDir dir;
  const std::string file = dir.file("tokenizer.json");
  testing::write_text(file, "{}");
  std::filesystem::resize_file(file, (uint64_t{256} << 20) + 1);
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData,
               {"tokenizer " + file +
                " is 268435457 bytes, more than kiri's limit for tokenizer files, 256 MiB "
                "(268435456 bytes: 28x Llama 3's tokenizer.json; loading costs about 9x the "
                "file's size in memory, docs/performance.md)"});
}

TEST(HfTokenizer, RefusesMissingFiles) {
  testing::TempDir dir;
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData,
               {dir.str(), "neither tokenizer.json nor vocab.json + merges.txt"});
  testing::write_text(dir.file("vocab.json"), "{}");
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData, {"merges.txt"});
  expect_error([&] { make_tokenizer(dir.file("nope/tokenizer.json"), ""); }, ErrorKind::kData,
               {"nope/tokenizer.json", "does not exist"});
  expect_error([] { make_tokenizer("llama3", ""); }, ErrorKind::kConfig,
               {"llama3", "byte", "gpt2", "tokenizer.json"});
  ASSERT_EQ(::mkfifo(dir.file("fifo.json").c_str(), 0600), 0);  // never opened: no hang
  expect_error([&] { make_tokenizer(dir.file("fifo.json"), ""); }, ErrorKind::kData,
               {"fifo.json", "neither a folder nor a regular file"});
  testing::write_text(dir.file("merges.txt"), "#version: 0.2\n");
  expect_error([&] { make_tokenizer(dir.str(), ""); }, ErrorKind::kData, {"vocab.json"});
}

}  // namespace
}  // namespace kiri::data

namespace kiri::data {
namespace {

// Large texts are pre-tokenized in chunks on several threads; pieces that run
// across a chunk's start (a 300 KB whitespace run, invalid UTF-8, a long word)
// must come out as the serial run has them.
TEST(HfTokenizer, ChunkedPretokenizationIsTheSerialOne) {
  std::string text = "start" + std::string(300000, ' ') + "x\n";
  uint32_t r = 12345;
  for (int i = 0; i < 400000; ++i) {  // bytes of every kind, often invalid UTF-8
    r = r * 1103515245u + 12345u;
    text += static_cast<char>(r >> 24);
  }
  text += std::string(200000, 'q') + " " + testing::read_text(kData + "/moby-dick.txt");
  for (const Tokenizer* tok : {&llama3(), static_cast<const Tokenizer*>(&testing::gpt2())}) {
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const Ids one = tok->encode(text);
    for (int n : {2, 3, 4, 7}) {
      omp_set_num_threads(n);
      EXPECT_EQ(tok->encode(text), one) << n << " threads";
    }
    omp_set_num_threads(threads);
    EXPECT_EQ(tok->decode(one), text);
  }
}

}  // namespace
}  // namespace kiri::data
