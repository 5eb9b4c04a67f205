#include "kiri/data/corpus.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "data/test_util.h"
#include "kiri/data/shard.h"
#include "kiri/data/staged_dir.h"
#include "test_paths.h"

namespace kiri::data {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using Ids = std::vector<int32_t>;

TEST(Corpus, ValTokenCountRoundsAndKeepsBothSides) {
  EXPECT_EQ(val_token_count(1000, 0.1), 100u);
  EXPECT_EQ(val_token_count(1005, 0.1), 101u);  // round(100.5)
  EXPECT_EQ(val_token_count(10, 0.01), 1u);     // at least one for validation
  EXPECT_EQ(val_token_count(10, 0.99), 9u);     // at least one for training
  expect_error([] { val_token_count(10, 0.0); }, ErrorKind::kInvalidArgument, {"0"});
  expect_error([] { val_token_count(10, 1.0); }, ErrorKind::kInvalidArgument, {"1"});
  expect_error([] { val_token_count(1, 0.5); }, ErrorKind::kInvalidArgument, {"1 tokens"});
}

TEST(Corpus, SplitsTheLastFractionIntoValidation) {
  testing::TempDir dir;
  const std::string text_path = dir.file("t.txt");
  testing::write_text(text_path, "abcdefghijklmnopqrst");  // 20 bytes
  ByteTokenizer byte;
  const PreparedCorpus c = prepare_corpus(text_path, byte, dir.file("out"), 0.25);
  EXPECT_FALSE(c.reused);
  EXPECT_EQ(c.train_path, dir.file("out/train.bin"));
  EXPECT_EQ(c.val_path, dir.file("out/val.bin"));
  EXPECT_EQ(c.train_tokens, 15u);
  EXPECT_EQ(c.val_tokens, 5u);
  const TokenShard train = read_shard(c.train_path), val = read_shard(c.val_path);
  EXPECT_EQ(byte.decode(train.tokens), "abcdefghijklmno");
  EXPECT_EQ(byte.decode(val.tokens), "pqrst");
  EXPECT_EQ(train.header.tokenizer, "byte");
  EXPECT_EQ(val.header.vocab_size, 257u);
  EXPECT_TRUE(fs::exists(dir.file("out/corpus.json")));
}

TEST(Corpus, PreparesMobyDickWithGpt2) {
  testing::TempDir dir;
  const std::string text_path = std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt";
  const PreparedCorpus c = prepare_corpus(text_path, testing::gpt2(), dir.str(), 0.1);
  EXPECT_EQ(c.train_tokens + c.val_tokens, 295189u);
  EXPECT_EQ(c.val_tokens, 29519u);
  Ids all = read_shard(c.train_path).tokens;
  const Ids val = read_shard(c.val_path).tokens;
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_TRUE(testing::gpt2().decode(all) == testing::read_text(text_path));
}

TEST(Corpus, RefusesMissingOrEmptyTextAndBadFraction) {
  testing::TempDir dir;
  ByteTokenizer byte;
  const std::string missing = dir.file("missing.txt"), empty = dir.file("empty.txt");
  expect_error([&] { prepare_corpus(missing, byte, dir.file("out"), 0.1); }, ErrorKind::kData,
               {missing});
  expect_error([&] { ensure_prepared(missing, byte, dir.file("out"), 0.1); }, ErrorKind::kData,
               {missing});
  testing::write_text(empty, "");
  expect_error([&] { prepare_corpus(empty, byte, dir.file("out"), 0.1); }, ErrorKind::kData,
               {empty, "empty"});
  testing::write_text(dir.file("one.txt"), "x");
  expect_error([&] { prepare_corpus(dir.file("one.txt"), byte, dir.file("out"), 0.1); },
               ErrorKind::kData, {"one.txt", "1 tokens"});
  testing::write_text(dir.file("t.txt"), "hello");
  for (double f : {0.0, 1.0, -0.5, 1.5})
    expect_error([&] { prepare_corpus(dir.file("t.txt"), byte, dir.file("out"), f); },
                 ErrorKind::kInvalidArgument, {"val_fraction"});
}

TEST(Corpus, AJsonLinesCorpusHasTheEndOfTextTokenBetweenItsDocuments) {
  testing::TempDir dir;
  ByteTokenizer byte;
  testing::write_text(dir.file("c.jsonl"), "{\"text\": \"first doc\"}\n{\"text\": \"second\"}\n");
  const PreparedCorpus c = prepare_corpus(dir.file("c.jsonl"), byte, dir.file("out"), 0.2);
  EXPECT_EQ(c.documents, 2u);
  Ids all = read_shard(c.train_path).tokens;
  const Ids val = read_shard(c.val_path).tokens;
  all.insert(all.end(), val.begin(), val.end());
  EXPECT_EQ(all.size(), 16u);
  EXPECT_EQ(all[9], 256);
  EXPECT_EQ(byte.decode(all), "first doc<|endoftext|>second");
  // A corpus file is text, never tokens: a shard given as one is binary.
  write_shard(dir.file("s.bin"), "byte", 257, Ids{1, 2, 3});
  expect_error([&] { prepare_corpus(dir.file("s.bin"), byte, dir.file("o2"), 0.2); },
               ErrorKind::kData, {"s.bin is not text"});
}

class EnsurePrepared : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_text(text, "The quick brown fox jumps over the lazy dog.\n");
    // The text is older than anything prepared from it.
    fs::last_write_time(text, fs::file_time_type::clock::now() - std::chrono::hours(1));
  }
  PreparedCorpus ensure(const Tokenizer& tok, double f = 0.2) {
    return ensure_prepared(text, tok, out, f);
  }
  testing::TempDir dir;
  std::string text = dir.file("t.txt");
  std::string out = dir.file("out");
  ByteTokenizer byte;
};

TEST_F(EnsurePrepared, ReusesCurrentShards) {
  const PreparedCorpus first = ensure(byte);
  EXPECT_FALSE(first.reused);
  const auto written = fs::last_write_time(first.train_path);
  const PreparedCorpus second = ensure(byte);
  EXPECT_TRUE(second.reused);
  EXPECT_EQ(second.train_tokens, first.train_tokens);
  EXPECT_EQ(second.val_tokens, first.val_tokens);
  EXPECT_EQ(second.train_path, first.train_path);
  EXPECT_EQ(fs::last_write_time(first.train_path), written);
}

TEST_F(EnsurePrepared, RedoesWhenTextIsNewer) {
  ensure(byte);
  const std::string longer = "A different and longer text than before, by far.\n";
  testing::write_text(text, longer);
  fs::last_write_time(text, fs::file_time_type::clock::now() + std::chrono::hours(1));
  const PreparedCorpus c = ensure(byte);
  EXPECT_FALSE(c.reused);
  EXPECT_EQ(c.train_tokens + c.val_tokens, longer.size());
  fs::last_write_time(text, fs::file_time_type::clock::now() - std::chrono::hours(1));
  EXPECT_TRUE(ensure(byte).reused);
  // Same size, only edited later: the time alone says the shards are stale.
  fs::last_write_time(text, fs::file_time_type::clock::now() + std::chrono::hours(2));
  EXPECT_FALSE(ensure(byte).reused);
}

TEST_F(EnsurePrepared, RedoesForAnotherTokenizerOrFraction) {
  ensure(byte);
  const PreparedCorpus g = ensure(testing::gpt2());
  EXPECT_FALSE(g.reused);
  EXPECT_EQ(read_shard_header(g.train_path).tokenizer, "gpt2");
  EXPECT_TRUE(ensure(testing::gpt2()).reused);
  const PreparedCorpus f = ensure(testing::gpt2(), 0.5);
  EXPECT_FALSE(f.reused);
  EXPECT_EQ(f.val_tokens, val_token_count(f.train_tokens + f.val_tokens, 0.5));
}

TEST_F(EnsurePrepared, RedoesWhenShardsAreDamagedOrMissing) {
  const PreparedCorpus c = ensure(byte);
  testing::write_text(c.val_path, "garbage");
  EXPECT_FALSE(ensure(byte).reused);
  EXPECT_EQ(read_shard(c.val_path).tokens.size(), c.val_tokens);
  fs::remove(c.train_path);
  EXPECT_FALSE(ensure(byte).reused);
  testing::write_text(out + "/corpus.json", "{not json");
  EXPECT_FALSE(ensure(byte).reused);
  EXPECT_TRUE(ensure(byte).reused);
}

// A pid no process has: a child's, after it exited and was reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

bool any_ours(const std::string&) {
  return true;
}

// Through a symlink the folder it names is replaced and the link kept; a killed run's staged
// folder is removed and, when the target is missing, its old folder is put back first.
// The ranks of one process (the thread test backend) prepare one corpus at the same time:
// each stages its own folder, and every commit leaves a complete corpus. Before the folders'
// names counted per process, the ranks shared one staged folder and removed each other's
// files ("cannot create the temporary file ...: No such file or directory").
TEST(StagedDir, RanksOfOneProcessStageApart) {
  testing::TempDir dir;
  ByteTokenizer byte;
  testing::write_text(dir.file("t.txt"), "abcdefghijklmnopqrst");
  {
    StagedDir a(dir.file("out"), any_ours), b(dir.file("out"), any_ours);
    EXPECT_NE(a.path(), b.path());
  }
  std::vector<std::thread> ranks;
  std::atomic<int> failed{0};
  for (int r = 0; r < 4; ++r)
    ranks.emplace_back([&] {
      try {
        build_corpus({dir.file("t.txt")}, byte, dir.file("out"), 0.25, {});
      } catch (const std::exception& e) {
        ++failed;
        ADD_FAILURE() << e.what();
      }
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(read_shard(dir.file("out/train.bin")).tokens.size(), 15u);
  for (const auto& e : fs::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename().string().find(".kiri-"), std::string::npos)
        << e.path() << " left behind";
}

TEST(StagedDir, KeepsSymlinksAndCleansUpAfterAKilledRun) {
  testing::TempDir dir;
  ByteTokenizer byte;
  testing::write_text(dir.file("t.txt"), "abcdefghij");
  fs::create_directories(dir.file("real"));
  fs::create_directory_symlink(dir.file("real"), dir.file("link"));
  build_corpus({dir.file("t.txt")}, byte, dir.file("link"), 0.2, {});
  EXPECT_TRUE(fs::is_symlink(dir.file("link")));
  EXPECT_EQ(read_shard(dir.file("real/train.bin")).tokens.size(), 8u);

  const std::string pid = std::to_string(dead_pid());
  fs::create_directories(dir.file(".real.kiri-new-" + pid));
  fs::rename(dir.file("real"), dir.file(".real.kiri-old-" + pid));  // killed between renames
  { StagedDir s(dir.file("link"), any_ours); }
  EXPECT_EQ(read_shard(dir.file("real/train.bin")).tokens.size(), 8u);  // put back
  EXPECT_FALSE(fs::exists(dir.file(".real.kiri-new-" + pid)));
  EXPECT_FALSE(fs::exists(dir.file(".real.kiri-old-" + pid)));
  // A live process's staged folder (this one's parent) is another run's: kept.
  const std::string live = dir.file(".real.kiri-new-" + std::to_string(::getppid()));
  fs::create_directories(live);
  { StagedDir s(dir.file("real"), any_ours); }
  EXPECT_TRUE(fs::exists(live));

  testing::write_text(dir.file("file"), "x");
  expect_error([&] { StagedDir s(dir.file("file"), any_ours); }, ErrorKind::kData,
               {"output folder " + dir.file("file") + " exists and is not a folder"});
  fs::create_directory_symlink(dir.file("loop"), dir.file("loop"));
  expect_error([&] { StagedDir s(dir.file("loop/out"), any_ours); }, ErrorKind::kData,
               {"cannot resolve the output folder " + dir.file("loop/out")});
}

}  // namespace
}  // namespace kiri::data
