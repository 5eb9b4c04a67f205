// `kiri data` and `kiri train --set data.dir=...` as a user runs them: shards from
// folders and JSON Lines train, the same losses on 1, 2 and 4 ranks, and bad data is a
// named error with a non-zero exit before the first step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace kiri::testing {
namespace {

namespace fs = std::filesystem;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string text_of(size_t n, uint64_t seed) {
  static const char* words[] = {"call ", "me ", "Ishmael ", "whale ", "sea ", "ship "};
  std::string s;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  while (s.size() < n) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    s += words[x % 6];
  }
  s.resize(n);
  return s;
}

std::string u16(const std::string& text) {
  std::string b;
  for (unsigned char c : text) b += {static_cast<char>(c), '\0'};
  return b;
}

// A 1-block byte model, 5 steps, in its own run folder.
std::string tiny_train(const std::string& run_dir, const std::string& data_dir) {
  return "train --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
         " --set model.n_head=2 --set model.block_size=32 --set train.seq_len=32"
         " --set train.steps=5 --set train.warmup=1 --set train.eval_batches=1"
         " --set run.dir=" +
         run_dir + " --set data.dir=" + data_dir;
}

// The loss of each step in the run's metrics.jsonl.
std::vector<double> losses_of(const std::string& run_dir) {
  std::vector<double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

// A corpus folder's bytes: each entry's name, size and a hash of its contents, in name
// order. Equal fingerprints mean the same manifest and shards, so the same tokens trained on.
std::string fingerprint(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  std::string all;
  for (const std::string& n : names) {
    std::ifstream in(folder + "/" + n, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    all += n + ":" + std::to_string(bytes.size()) + ":" +
           std::to_string(std::hash<std::string>{}(bytes)) + " ";
  }
  return all;
}

// The entries of `folder` whose names start with `prefix`.
std::vector<std::string> entries_starting(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename());
  return out;
}

class DataCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = kiri::testing::temp_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(dir); }
  void expect_refused(const Result& r, int code, std::initializer_list<std::string> needles) {
    EXPECT_EQ(r.code, code) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << "trained: " << r.output;
    for (const std::string& n : needles)
      EXPECT_NE(r.output.find(n), std::string::npos) << "lacks '" << n << "': " << r.output;
  }
  std::string dir;
};

TEST_F(DataCli, FoldersGlobsAndJsonLinesBecomeShardsThatTrain) {
  fs::create_directories(dir + "/in/b");
  write_bytes(dir + "/in/a.txt", text_of(2000, 1));
  write_bytes(dir + "/in/b/c.txt", text_of(2000, 2));
  std::string jsonl;
  for (int i = 0; i < 10; ++i) jsonl += "{\"body\": \"" + text_of(200, 3 + i) + "\"}\n";
  write_bytes(dir + "/d.jsonl", jsonl);
  Result r = run_kiri("data " + dir + "/in '" + dir +
                      "/*.jsonl' --text-key body --tokenizer byte"
                      " --out " +
                      dir + "/shards");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("12 documents"), std::string::npos) << r.output;
  // 6000 bytes of text and an end-of-text token between each two of the 12 documents.
  const auto m = nlohmann::json::parse(std::ifstream(dir + "/shards/corpus.json"));
  EXPECT_EQ(m["train_tokens"].get<int>() + m["val_tokens"].get<int>(), 6000 + 11);
  EXPECT_EQ(m["sources"].size(), 3u);
  r = run_kiri(tiny_train(dir + "/run", dir + "/shards"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step      5/5"), std::string::npos) << r.output;
  EXPECT_EQ(losses_of(dir + "/run").size(), 5u);
}

// One global batch of 4 sequences on 1, 2 and 4 ranks: the same samples, so the same
// losses (to the 4 decimals metrics.jsonl keeps; the reduction order differs).
TEST_F(DataCli, OneTwoAndFourRanksReadTheSameSamples) {
  fs::create_directories(dir + "/nano");
  write_bytes(dir + "/nano/train.bin", u16(text_of(20000, 5)));
  write_bytes(dir + "/nano/val.bin", u16(text_of(2000, 6)));
  std::vector<std::vector<double>> runs;
  for (int ranks : {1, 2, 4}) {
    const std::string run = dir + "/run" + std::to_string(ranks);
    const std::string cmd =
        tiny_train(run, dir + "/nano") + " --set train.micro_batch=" + std::to_string(4 / ranks);
    const Result r = run_kiri(
        ranks == 1 ? cmd : "launch -n " + std::to_string(ranks) + " --threads 1 -- " + cmd);
    ASSERT_EQ(r.code, 0) << r.output;
    runs.push_back(losses_of(run));
    ASSERT_EQ(runs.back().size(), 5u);
  }
  for (size_t k = 1; k < runs.size(); ++k)
    for (size_t s = 0; s < 5; ++s) EXPECT_NEAR(runs[k][s], runs[0][s], 2e-4) << k << " " << s;
}

// A `kiri data` rewrite of a folder that trains, killed at each of its points (staged_dir.h:
// the staged folder made, train.bin, val.bin, corpus.json written in it, swapped in): the
// folder is the old corpus byte for byte until the swap and the new one after it, never a
// mix; the next run removes the killed run's temporary folder, naming it, and leaves none.
TEST_F(DataCli, AKilledRewriteLeavesTheOldCorpusOrTheNewOne) {
  write_bytes(dir + "/old.txt", text_of(3000, 1));
  write_bytes(dir + "/new.txt", text_of(2000, 7));
  const std::string data = "data --tokenizer byte --out " + dir + "/c ";
  ASSERT_EQ(run_kiri(data + dir + "/new.txt").code, 0);
  const std::string fresh = fingerprint(dir + "/c");
  for (int point = 1; point <= 5; ++point) {
    SCOPED_TRACE("point " + std::to_string(point));
    Result r = run_kiri(data + dir + "/old.txt");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string old = fingerprint(dir + "/c");
    ASSERT_NE(old, fresh);
    r = run_kiri(data + dir + "/new.txt", "KIRI_FAULT=datakill:0:" + std::to_string(point));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("killing kiri data at point " + std::to_string(point)),
              std::string::npos)
        << r.output;
    EXPECT_EQ(fingerprint(dir + "/c"), point < 5 ? old : fresh);
    const std::vector<std::string> left = entries_starting(dir, ".c.kiri-new-");
    ASSERT_EQ(left.size(), 1u);
    r = run_kiri(data + dir + "/new.txt");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("data: removed " + dir + "/" + left[0] + ", left by a run"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(fingerprint(dir + "/c"), fresh);
    EXPECT_TRUE(entries_starting(dir, ".c.").empty());
  }
  // A rewrite that fails (an empty input) leaves the corpus and no temporaries either.
  write_bytes(dir + "/empty.txt", "");
  expect_refused(run_kiri(data + dir + "/empty.txt"), 1, {"empty.txt is empty"});
  EXPECT_EQ(fingerprint(dir + "/c"), fresh);
  EXPECT_TRUE(entries_starting(dir, ".c.").empty());
  // A folder holding files kiri data did not write is refused, not replaced.
  write_bytes(dir + "/c/notes.md", "mine");
  expect_refused(run_kiri(data + dir + "/old.txt"), 1,
                 {"output folder " + dir + "/c holds notes.md, which kiri data did not write"});
  EXPECT_TRUE(fs::exists(dir + "/c/notes.md"));
}

// Symlink loops among the inputs, one as --out, an empty --out and a file as --out are data
// errors naming the path (they were "unexpected error: filesystem error", or "no input
// files" for a file as --out).
TEST_F(DataCli, SymlinkLoopsAndBadOutputFoldersAreNamed) {
  fs::create_directories(dir + "/in");
  write_bytes(dir + "/in/a.txt", text_of(500, 1));
  fs::create_symlink(dir + "/in/loop", dir + "/in/loop");
  expect_refused(run_kiri("data " + dir + "/in --tokenizer byte --out " + dir + "/o"), 1,
                 {"data error", "input " + dir + "/in/loop is a loop of symbolic links",
                  "Too many levels of symbolic links"});
  expect_refused(run_kiri("data " + dir + "/in/loop --tokenizer byte --out " + dir + "/o"), 1,
                 {"data error", "input " + dir + "/in/loop is a loop of symbolic links"});
  fs::remove(dir + "/in/loop");
  fs::create_symlink(dir + "/o", dir + "/o");
  expect_refused(run_kiri("data " + dir + "/in --tokenizer byte --out " + dir + "/o/x"), 1,
                 {"data error", "cannot resolve the output folder " + dir + "/o/x"});
  // An empty --out is refused where every empty path flag is, before kiri data starts.
  expect_refused(run_kiri("data " + dir + "/in --tokenizer byte --out ''"), 2,
                 {"config error", "--out is empty: give the DIR it names"});
  expect_refused(run_kiri("data " + dir + "/in/a.txt --tokenizer byte --out " + dir + "/in/a.txt"),
                 1,
                 {"data error", "output folder " + dir + "/in/a.txt exists and is not a folder"});
}

TEST_F(DataCli, BinaryTextIsRefused) {
  write_bytes(dir + "/blob.dat", std::string("\x7f"
                                             "ELF\0\0\0\x02",
                                             8) +
                                     text_of(100, 1));
  expect_refused(run_kiri("data " + dir + "/blob.dat --tokenizer byte --out " + dir + "/o"), 1,
                 {"data error", "blob.dat is not text", "NUL byte at offset 4"});
  EXPECT_FALSE(fs::exists(dir + "/o/corpus.json"));
  // A shard given as data.corpus is not tokenized as text.
  fs::create_directories(dir + "/nano");
  write_bytes(dir + "/nano/train.bin", u16(text_of(2000, 2)));
  expect_refused(run_kiri("train --set data.tokenizer=byte --set run.dir=" + dir +
                          "/run --set data.corpus=" + dir + "/nano/train.bin"),
                 1, {"train.bin is not text"});
  expect_refused(run_kiri("train --set data.tokenizer=byte --set run.dir=" + dir +
                          "/run --set data.corpus=" + dir + "/nano"),
                 1, {"is a folder", "data.dir="});
}

TEST_F(DataCli, BadShardsAreNamedErrors) {
  fs::create_directories(dir + "/vocab");
  std::string big = u16(text_of(3000, 3));
  big[2 * 100 + 1] = 2;  // token 2 * 256 + the byte
  write_bytes(dir + "/vocab/train.bin", big);
  write_bytes(dir + "/vocab/val.bin", u16(text_of(500, 4)));
  expect_refused(run_kiri(tiny_train(dir + "/run", dir + "/vocab")), 1,
                 {"data error", "position 100", "vocab size 257"});
  // Corrupted kiri shards: a flipped payload byte, then a bad magic.
  write_bytes(dir + "/t.txt", text_of(3000, 5));
  ASSERT_EQ(run_kiri("data " + dir + "/t.txt --tokenizer byte --out " + dir + "/k").code, 0);
  std::string shard;
  {
    std::ifstream in(dir + "/k/train.bin", std::ios::binary);
    shard.assign(std::istreambuf_iterator<char>(in), {});
  }
  shard[500] ^= 1;
  write_bytes(dir + "/k/train.bin", shard);
  expect_refused(run_kiri(tiny_train(dir + "/run", dir + "/k")), 1, {"fails its checksum"});
  shard[0] = 'X';
  write_bytes(dir + "/k/train.bin", shard);
  expect_refused(run_kiri(tiny_train(dir + "/run", dir + "/k")), 1,
                 {"train.bin has no kiri header"});
  // Empty and too short.
  fs::create_directories(dir + "/short");
  write_bytes(dir + "/short/train.bin", u16("only twenty tokens.."));
  write_bytes(dir + "/short/val.bin", u16(text_of(500, 4)));
  expect_refused(run_kiri(tiny_train(dir + "/run", dir + "/short")), 1,
                 {"20 tokens", "shorter than one sample", "33"});
  write_bytes(dir + "/short/train.bin", "");
  expect_refused(run_kiri(tiny_train(dir + "/run", dir + "/short")), 1,
                 {"training split", "is empty"});
  write_bytes(dir + "/empty.txt", "");
  expect_refused(run_kiri("data " + dir + "/empty.txt --tokenizer byte --out " + dir + "/e"), 1,
                 {"empty.txt is empty"});
  expect_refused(run_kiri("data " + dir + "/t.txt --format csv --out " + dir + "/e"), 2,
                 {"unknown input format 'csv'"});
  // Two corpora.
  expect_refused(
      run_kiri(tiny_train(dir + "/run", dir + "/k") + " --set data.corpus=" + dir + "/t.txt"), 2,
      {"both name a corpus"});
}

}  // namespace
}  // namespace kiri::testing
