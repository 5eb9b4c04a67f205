// Training on data.dir: each input form trains, a resume continues the sample stream
// bitwise, a corpus larger than train.mem_limit trains, and bad shards are named errors
// before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiri/data/corpus.h"
#include "kiri/data/shard.h"
#include "kiri/data/token_source.h"
#include "kiri/train/trainer.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

using kiri::testing::temp_dir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Text of n bytes with some structure to learn: sentences from a small vocabulary.
std::string text_of(size_t n, uint64_t seed) {
  static const char* words[] = {"the ",   "whale ", "sea ",  "ship ", "a ",
                                "white ", "and ",   "Ahab ", "said ", "of "};
  std::string s;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  while (s.size() < n) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    s += words[x % 10];
    if (x % 7 == 0) s += ".\n";
  }
  s.resize(n);
  return s;
}

std::string u16(const std::string& text) {
  std::string b;
  for (unsigned char c : text) b += {static_cast<char>(c), '\0'};
  return b;
}

std::string llmc(const std::string& text) {
  std::vector<int32_t> h(256, 0);
  h[0] = data::kLlmcMagic;
  h[1] = 1;
  h[2] = static_cast<int32_t>(text.size());
  return std::string(reinterpret_cast<const char*>(h.data()), 1024) + u16(text);
}

RunConfig dir_config(const std::string& data_dir) {
  RunConfig c = byte_test_config(1, 2, 32, 4);
  c.data.dir = data_dir;
  c.train.steps = 5;
  c.train.warmup = 1;
  c.train.optimizer.lr = 3e-3;
  c.train.min_lr = 3e-4;
  return c;
}

// Five steps from a fresh byte model: the first loss near ln(257), the fifth below it.
std::vector<double> train5(const RunConfig& c) {
  Trainer t(c);
  std::vector<double> losses;
  for (int s = 0; s < 5; ++s) losses.push_back(t.train_step().loss);
  EXPECT_NEAR(losses[0], std::log(257.0), 0.3);
  EXPECT_LT(losses[4], losses[0]);
  EXPECT_TRUE(std::isfinite(t.evaluate(1)));
  return losses;
}

TEST(DataDir, EachInputFormTrainsFiveSteps) {
  const std::string dir = temp_dir("forms");
  data::ByteTokenizer byte;
  // A folder of text files and a JSON Lines file, through kiri data's builder.
  fs::create_directories(dir + "/texts/sub");
  for (int i = 0; i < 4; ++i)
    write_bytes(dir + "/texts/" + (i == 3 ? "sub/" : "") + std::to_string(i) + ".txt",
                text_of(3000, i));
  data::build_corpus(data::expand_inputs({dir + "/texts"}), byte, dir + "/from-texts", 0.1, {});
  std::string jsonl;
  for (int i = 0; i < 20; ++i) jsonl += "{\"text\": \"" + text_of(600, 10 + i) + "\"}\n";
  for (size_t p; (p = jsonl.find(".\n")) != std::string::npos;) jsonl.replace(p, 2, ". ");
  write_bytes(dir + "/d.jsonl", jsonl);
  const data::PreparedCorpus j =
      data::build_corpus({dir + "/d.jsonl"}, byte, dir + "/from-jsonl", 0.1, {});
  EXPECT_EQ(j.documents, 20u);
  // nanoGPT's and llm.c's folders as they are.
  fs::create_directories(dir + "/nano");
  write_bytes(dir + "/nano/train.bin", u16(text_of(9000, 1)));
  write_bytes(dir + "/nano/val.bin", u16(text_of(1000, 2)));
  fs::create_directories(dir + "/llmc");
  write_bytes(dir + "/llmc/tiny_train_000001.bin", llmc(text_of(5000, 3)));
  write_bytes(dir + "/llmc/tiny_train_000002.bin", llmc(text_of(4000, 4)));
  write_bytes(dir + "/llmc/tiny_val_000000.bin", llmc(text_of(1000, 5)));
  for (const char* form : {"from-texts", "from-jsonl", "nano", "llmc"}) {
    SCOPED_TRACE(form);
    train5(dir_config(dir + "/" + form));
  }
  fs::remove_all(dir);
}

// The data position is all a checkpoint keeps of the stream: a run resumed at step 3
// reads the samples the uninterrupted run reads, so its losses are the same bits.
TEST(DataDir, AResumeContinuesTheStreamBitwise) {
  const std::string dir = temp_dir("resume");
  fs::create_directories(dir + "/nano");
  write_bytes(dir + "/nano/train.bin", u16(text_of(20000, 7)));
  write_bytes(dir + "/nano/val.bin", u16(text_of(1000, 8)));
  RunConfig c = dir_config(dir + "/nano");
  const std::vector<double> straight = train5(c);
  c.checkpoint.dir = dir + "/ckpt";
  {
    Trainer t(c);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(t.train_step().loss, straight[s]);
    t.save_checkpoint();
  }
  Trainer t(c);
  t.load_checkpoint(c.checkpoint.dir);
  EXPECT_EQ(t.train_step().loss, straight[3]);
  EXPECT_EQ(t.train_step().loss, straight[4]);
  fs::remove_all(dir);
}

// Mapped shards are not tensors: a 6 MB corpus trains under a 2 MiB allocator limit.
TEST(DataDir, ACorpusLargerThanTheMemoryLimitTrains) {
  const std::string dir = temp_dir("mem");
  fs::create_directories(dir + "/nano");
  write_bytes(dir + "/nano/train.bin", u16(text_of(3'000'000, 9)));
  write_bytes(dir + "/nano/val.bin", u16(text_of(2000, 10)));
  ASSERT_GT(fs::file_size(dir + "/nano/train.bin"), uint64_t{2} << 20);
  RunConfig c = dir_config(dir + "/nano");
  c.train.mem_limit = "2MiB";  // the run peaks near 0.8 MiB
  train5(c);
  fs::remove_all(dir);
}

void expect_data_error(const RunConfig& c, std::initializer_list<std::string> needles) {
  try {
    Trainer t(c);
    ADD_FAILURE() << "the trainer was built";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    for (const std::string& n : needles)
      EXPECT_NE(e.message().find(n), std::string::npos) << e.message() << " lacks " << n;
  }
}

TEST(DataDir, BadShardsAreNamedBeforeTheFirstStep) {
  const std::string dir = temp_dir("bad");
  const auto folder = [&](const std::string& name, const std::string& train,
                          const std::string& val) {
    fs::create_directories(dir + "/" + name);
    write_bytes(dir + "/" + name + "/train.bin", train);
    write_bytes(dir + "/" + name + "/val.bin", val);
    return dir_config(dir + "/" + name);
  };
  const std::string val = u16(text_of(100, 1));
  std::string big = u16(text_of(5000, 1));
  big[2 * 4321 + 1] = 1;  // token 256 + 'x' = 376, past the vocab of 257
  big[2 * 4321] = 'x';
  expect_data_error(folder("vocab", big, val), {"token 376", "position 4321", "vocab size 257"});
  expect_data_error(folder("empty", "", val), {"training split", "empty"});
  expect_data_error(folder("short", u16("abcdefghij"), val),
                    {"training split", "10 tokens", "seq_len + 1 = 33"});
  expect_data_error(folder("shortval", big.substr(0, 2000), u16("abc")),
                    {"validation split", "3 tokens"});
  std::string bad_llmc = llmc(text_of(3000, 2));
  bad_llmc[8] = 0x7f;  // the count
  expect_data_error(folder("header", bad_llmc, val), {"llm.c", "wrong token count"});
  // A kiri shard whose payload changed after it was written.
  data::ByteTokenizer byte;
  write_bytes(dir + "/t.txt", text_of(4000, 3));
  data::build_corpus({dir + "/t.txt"}, byte, dir + "/kiri", 0.1, {});
  std::string shard;
  {
    std::ifstream in(dir + "/kiri/train.bin", std::ios::binary);
    shard.assign(std::istreambuf_iterator<char>(in), {});
  }
  shard[data::kShardHeaderBytes + 1000] ^= 0x20;
  write_bytes(dir + "/kiri/train.bin", shard);
  expect_data_error(dir_config(dir + "/kiri"), {"train.bin", "fails its checksum"});
  // Shards of another tokenizer.
  data::build_corpus({dir + "/t.txt"}, byte, dir + "/kiri2", 0.1, {});
  RunConfig gpt2 = dir_config(dir + "/kiri2");
  gpt2.data.tokenizer = "gpt2";
  expect_data_error(gpt2,
                    {"made with tokenizer byte", "this run's is gpt2 (data.tokenizer = gpt2)"});
  // data.corpus and data.dir both.
  RunConfig both = dir_config(dir + "/kiri2");
  both.data.corpus = dir + "/t.txt";
  try {
    Trainer t(both);
    ADD_FAILURE() << "built";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(e.message().find("both name a corpus"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::train
