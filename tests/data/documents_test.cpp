#include "kiri/data/documents.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/test_util.h"
#include "kiri/data/corpus.h"
#include "kiri/data/dataset.h"
#include "kiri/data/shard.h"

namespace kiri::data {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using Ids = std::vector<int32_t>;

Ids bytes_of(const std::string& s) {
  return ByteTokenizer().encode(s);
}

TEST(Documents, FoldersAreRecursiveAndSortedAndGlobsExpand) {
  testing::TempDir dir;
  fs::create_directories(dir.file("in/b"));
  fs::create_directories(dir.file("in/.git"));
  testing::write_text(dir.file("in/z.txt"), "z");
  testing::write_text(dir.file("in/b/a.txt"), "a");
  testing::write_text(dir.file("in/a.txt"), "a");
  testing::write_text(dir.file("in/.git/x"), "hidden");
  testing::write_text(dir.file("in/.hidden.txt"), "hidden");
  EXPECT_EQ(expand_inputs({dir.file("in")}),
            (std::vector<std::string>{dir.file("in/a.txt"), dir.file("in/b/a.txt"),
                                      dir.file("in/z.txt")}));
  EXPECT_EQ(expand_inputs({dir.file("in/*.txt"), dir.file("in/b/a.txt")}),
            (std::vector<std::string>{dir.file("in/a.txt"), dir.file("in/z.txt"),
                                      dir.file("in/b/a.txt")}));
  expect_error([&] { expand_inputs({dir.file("in/*.md")}); }, ErrorKind::kData,
               {"*.md", "matches no file"});
  expect_error([&] { expand_inputs({dir.file("nope.txt")}); }, ErrorKind::kData,
               {"nope.txt", "does not exist"});
  fs::create_directories(dir.file("empty"));
  expect_error([&] { expand_inputs({dir.file("empty")}); }, ErrorKind::kData, {"no files"});
}

TEST(Documents, BinaryIsNotText) {
  check_text("plain text, caf\xc3\xa9\n", "ok.txt");
  check_text(std::string(200, 'a') + "\xff", "one-bad-byte.txt");  // 1 of 201: under 1%
  expect_error([] { check_text(std::string("ab\0cd", 5), "nul.txt"); }, ErrorKind::kData,
               {"nul.txt", "NUL byte at offset 2"});
  expect_error([] { check_text(std::string(50, 'a') + std::string(10, '\xfe'), "latin.bin"); },
               ErrorKind::kData, {"latin.bin", "10 of its 60 bytes", "UTF-8"});
}

class Build : public ::testing::Test {
 protected:
  PreparedCorpus build(const std::vector<std::string>& inputs, DocumentOptions opts = {},
                       double f = 0.25) {
    return build_corpus(expand_inputs(inputs), byte, out, f, opts);
  }
  Ids all_tokens() {
    Ids all = read_shard(out + "/train.bin").tokens;
    const Ids val = read_shard(out + "/val.bin").tokens;
    all.insert(all.end(), val.begin(), val.end());
    return all;
  }
  nlohmann::json manifest() {
    return nlohmann::json::parse(testing::read_text(out + "/corpus.json"));
  }
  testing::TempDir dir;
  std::string out = dir.file("out");
  ByteTokenizer byte;
};

TEST_F(Build, TextFilesAreDocumentsJoinedByTheEndOfTextToken) {
  fs::create_directories(dir.file("in"));
  testing::write_text(dir.file("in/1.txt"), "ab");
  testing::write_text(dir.file("in/2.txt"), "cd");
  testing::write_text(dir.file("in/3.txt"), "efgh");
  const PreparedCorpus c = build({dir.file("in")});
  EXPECT_EQ(c.documents, 3u);
  Ids want = bytes_of("ab");
  want.push_back(256);
  for (int t : bytes_of("cd")) want.push_back(t);
  want.push_back(256);
  for (int t : bytes_of("efgh")) want.push_back(t);
  EXPECT_EQ(all_tokens(), want);
  EXPECT_EQ(c.train_tokens + c.val_tokens, 10u);
  const nlohmann::json m = manifest();
  EXPECT_EQ(m["format"], 2);
  EXPECT_EQ(m["tokenizer"], "byte");
  EXPECT_EQ(m["vocab_size"], 257);
  EXPECT_EQ(m["eot_token"], 256);
  EXPECT_EQ(m["documents"], 3);
  ASSERT_EQ(m["sources"].size(), 3u);
  EXPECT_EQ(m["sources"][1]["path"], dir.file("in/2.txt"));
  EXPECT_EQ(m["sources"][1]["tokens"], 3);  // the EOT before it, then "cd"
  ASSERT_EQ(m["shards"].size(), 2u);
  char sum[17];
  std::snprintf(sum, sizeof sum, "%016llx",
                static_cast<unsigned long long>(read_shard_header(out + "/val.bin").checksum));
  EXPECT_EQ(m["shards"][1]["fnv1a64"], sum);
  EXPECT_EQ(m["shards"][1]["split"], "val");
  EXPECT_EQ(m["shards"][0]["tokens"], c.train_tokens);
}

TEST_F(Build, SeparatorSplitsATextIntoDocuments) {
  testing::write_text(dir.file("t.txt"), "one<|sep|>two<|sep|>\n<|sep|>three");
  DocumentOptions o;
  o.separator = "<|sep|>";
  EXPECT_EQ(build({dir.file("t.txt")}, o).documents, 3u);  // the blank one is skipped
  EXPECT_EQ(byte.decode(all_tokens()), "one<|endoftext|>two<|endoftext|>three");
}

TEST_F(Build, JsonLinesTakeTheTextKeyAndNameABadLine) {
  testing::write_text(dir.file("d.jsonl"),
                      "{\"text\": \"hi\", \"id\": 1}\n\n{\"text\": \"yo\\n\"}\n");
  EXPECT_EQ(build({dir.file("d.jsonl")}).documents, 2u);
  EXPECT_EQ(byte.decode(all_tokens()), "hi<|endoftext|>yo\n");
  testing::write_text(dir.file("k.jsonl"), "{\"body\": \"hi\"}\n{\"body\": \"ho\"}\n");
  DocumentOptions o;
  o.text_key = "body";
  EXPECT_EQ(build({dir.file("k.jsonl")}, o).documents, 2u);
  testing::write_text(dir.file("bad.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\"\n");
  expect_error([&] { build({dir.file("bad.jsonl")}); }, ErrorKind::kData,
               {"bad.jsonl:2", "not a JSON value"});
  testing::write_text(dir.file("key.jsonl"), "{\"text\": \"a\"}\n\n{\"txt\": \"b\"}\n");
  expect_error([&] { build({dir.file("key.jsonl")}); }, ErrorKind::kData,
               {"key.jsonl:3", "\"text\""});
  testing::write_text(dir.file("num.jsonl"), "{\"text\": 5}\n");
  expect_error([&] { build({dir.file("num.jsonl")}); }, ErrorKind::kData, {"num.jsonl:1"});
}

TEST_F(Build, TokenFilesAreReadByTheirHeader) {
  write_shard(dir.file("a.bin"), "byte", 257, bytes_of("xyz"));
  testing::write_text(dir.file("b.txt"), "uv");
  build({dir.file("a.bin"), dir.file("b.txt")});
  EXPECT_EQ(byte.decode(all_tokens()), "xyz<|endoftext|>uv");
  EXPECT_EQ(manifest()["sources"][0]["format"], "kiri");
  write_shard(dir.file("g.bin"), "gpt2", 50257, Ids{50000});
  expect_error([&] { build({dir.file("g.bin")}); }, ErrorKind::kData,
               {"g.bin", "tokenizer gpt2", "not byte"});
  // nanoGPT's raw uint16 has no header: as text it is binary; --format tokens reads it.
  testing::write_text(dir.file("n.bin"), std::string("a\0b\0c\0", 6));
  expect_error([&] { build({dir.file("n.bin")}); }, ErrorKind::kData, {"n.bin", "NUL"});
  DocumentOptions o;
  o.format = InputFormat::kTokens;
  build({dir.file("n.bin")}, o);
  EXPECT_EQ(byte.decode(all_tokens()), "abc");
  testing::write_text(dir.file("big.bin"), std::string("a\0\x2c\x01", 4));  // 300
  expect_error([&] { build({dir.file("big.bin")}, o); }, ErrorKind::kData,
               {"big.bin", "token 300", "257"});
}

TEST_F(Build, ShardsInsideAnInputFolderAreNotReadAgain) {
  out = dir.file("in/shards");
  fs::create_directories(dir.file("in"));
  testing::write_text(dir.file("in/a.txt"), "abcdefgh");
  EXPECT_EQ(build({dir.file("in")}).train_tokens, 6u);
  const PreparedCorpus again = build({dir.file("in")});  // in/shards/*.bin are skipped
  EXPECT_EQ(again.train_tokens + again.val_tokens, 8u);
  EXPECT_EQ(manifest()["sources"].size(), 1u);
}

TEST_F(Build, EmptyCorporaAreNamed) {
  testing::write_text(dir.file("e.txt"), "");
  testing::write_text(dir.file("e.jsonl"), "\n\n");
  expect_error(
      [&] {
        build({dir.file("e.txt"), dir.file("e.jsonl")});
      },
      ErrorKind::kData, {"2 input files", "empty"});
  EXPECT_FALSE(fs::exists(out + "/corpus.json"));
}

TEST(Dataset, OpensKiriNanoGptAndLlmcFolders) {
  testing::TempDir dir;
  ByteTokenizer byte;
  testing::write_text(dir.file("t.txt"), "hello world, hello shards");
  build_corpus({dir.file("t.txt")}, byte, dir.file("kiri"), 0.2, {});
  const Dataset k = open_dataset(dir.file("kiri"));
  EXPECT_EQ(k.layout, "kiri");
  EXPECT_EQ(k.tokenizer, "byte");
  EXPECT_EQ(k.train.size() + k.val.size(), 25u);
  EXPECT_EQ(k.val.size(), 5u);

  fs::create_directories(dir.file("nano"));
  testing::write_text(dir.file("nano/train.bin"), std::string("a\0b\0c\0", 6));
  testing::write_text(dir.file("nano/val.bin"), std::string("d\0", 2));
  testing::write_text(dir.file("nano/meta.pkl"), "not a shard");
  const Dataset n = open_dataset(dir.file("nano"));
  EXPECT_EQ(n.layout, "nanoGPT");
  EXPECT_EQ(n.train.size(), 3u);
  EXPECT_EQ(n.val.at(0), 'd');

  fs::create_directories(dir.file("llmc"));
  std::vector<int32_t> h(256, 0);
  h[0] = kLlmcMagic;
  h[1] = 1;
  const auto shard = [&](const std::string& name, const std::string& toks) {
    h[2] = static_cast<int32_t>(toks.size() / 2);
    testing::write_text(dir.file("llmc/" + name),
                        std::string(reinterpret_cast<const char*>(h.data()), 1024) + toks);
  };
  shard("fw_train_000002.bin", std::string("c\0", 2));
  shard("fw_train_000001.bin", std::string("a\0b\0", 4));
  shard("fw_val_000000.bin", std::string("v\0", 2));
  const Dataset l = open_dataset(dir.file("llmc"));
  EXPECT_EQ(l.layout, "llm.c");
  ASSERT_EQ(l.train.size(), 3u);
  EXPECT_EQ(l.train.at(0), 'a');  // in name order
  EXPECT_EQ(l.train.at(2), 'c');
}

// What an older kiri's data.corpus left beside a text: corpus.json format 1, no shard list.
TEST(Dataset, OpensAnOlderKirisFolder) {
  testing::TempDir dir;
  fs::create_directories(dir.file("old"));
  write_shard(dir.file("old/train.bin"), "byte", 256, bytes_of("older train"));
  write_shard(dir.file("old/val.bin"), "byte", 256, bytes_of("val"));
  testing::write_text(dir.file("old/corpus.json"),
                      R"({"format": 1, "tokenizer": "byte", "vocab_size": 256})");
  const Dataset d = open_dataset(dir.file("old"));
  EXPECT_EQ(d.layout, "kiri");
  EXPECT_EQ(d.tokenizer, "byte");
  EXPECT_EQ(d.train.size(), 11u);
  EXPECT_EQ(d.val.at(2), 'l');
  testing::write_text(dir.file("old/corpus.json"), R"({"format": 1, "tokenizer": 7})");
  expect_error([&] { open_dataset(dir.file("old")); }, ErrorKind::kData, {"names no tokenizer"});
}

TEST(Dataset, RefusesWhatIsNotAShardFolder) {
  testing::TempDir dir;
  expect_error([&] { open_dataset(dir.file("none")); }, ErrorKind::kData,
               {"none", "does not exist"});
  testing::write_text(dir.file("f.txt"), "text");
  expect_error([&] { open_dataset(dir.file("f.txt")); }, ErrorKind::kData, {"not a folder"});
  fs::create_directories(dir.file("only"));
  testing::write_text(dir.file("only/train.bin"), std::string("a\0", 2));
  expect_error([&] { open_dataset(dir.file("only")); }, ErrorKind::kData,
               {"only", "no validation shard"});
  // A kiri folder whose shard was replaced by another: the manifest disagrees with it.
  ByteTokenizer byte;
  testing::write_text(dir.file("t.txt"), "hello world, hello shards");
  build_corpus({dir.file("t.txt")}, byte, dir.file("k"), 0.2, {});
  write_shard(dir.file("k/val.bin"), "byte", 257, bytes_of("other"));
  expect_error([&] { open_dataset(dir.file("k")); }, ErrorKind::kData,
               {"val.bin", "disagrees with", "corpus.json"});
}

}  // namespace
}  // namespace kiri::data
