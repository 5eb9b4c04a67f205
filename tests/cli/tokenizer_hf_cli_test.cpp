// `kiri data` and `kiri config` with a Hugging Face tokenizer given by path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

using kiri::testing::run_kiri;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CliHfTokenizer, DataPreparesShardsWithLlama3sTokenizerJson) {
  const std::string dir = kiri::testing::temp_dir("hf_tokenizer");
  {
    std::ofstream out(dir + "/text.txt");
    out << read(std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt").substr(0, 20000);
  }
  const std::string llama3 = std::string(KIRI_TEST_DATA_DIR) + "/llama3";
  auto r = run_kiri("data " + dir + "/text.txt --out " + dir + "/out --tokenizer " + llama3);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string manifest = read(dir + "/out/corpus.json");
  EXPECT_NE(manifest.find("\"vocab_size\": 128256"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"tokenizer\": \"hf-"), std::string::npos) << manifest;
  // 4,616 + 513 tokens: @lenml/tokenizers' count for this text (the tokenizer tests
  // check the ids themselves).
  EXPECT_NE(manifest.find("\"train_tokens\": 4616"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"val_tokens\": 513"), std::string::npos) << manifest;

  // A tokenizer.json kiri cannot read is named, with a non-zero exit.
  std::filesystem::create_directories(dir + "/bad");
  std::ofstream(dir + "/bad/tokenizer.json") << R"({"model": {"type": "WordPiece"}})";
  r = run_kiri("data " + dir + "/text.txt --out " + dir + "/out2 --tokenizer " + dir + "/bad");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("model.type = \"WordPiece\""), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/out2/train.bin"));

  r = run_kiri("config --set data.tokenizer=" + llama3);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(llama3), std::string::npos) << r.output;

  // Those shards train with the tokenizer given by path (the shards name it hf-<hash>), and
  // a run whose tokenizer made other shards is refused naming both.
  const std::string train =
      "train --set data.dir=" + dir +
      "/out --set model.arch=llama --set model.n_layer=1"
      " --set model.n_embd=16 --set model.n_head=2 --set model.block_size=16"
      " --set model.vocab_size=128256 --set train.seq_len=16"
      " --set train.micro_batch=1 --set train.steps=1 --set train.eval_every=0"
      " --set checkpoint.every=0 --set run.dir=" +
      dir + "/run --overwrite";
  r = run_kiri(train + " --set data.tokenizer=" + llama3);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step      1/1"), std::string::npos) << r.output;
  r = run_kiri(train + " --set data.tokenizer=gpt2");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("were made with tokenizer hf-"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("this run's is gpt2 (data.tokenizer = gpt2)"), std::string::npos)
      << r.output;

  // The shards keep a copy of the tokenizer's files: moved away from the path they were made
  // with, they train with no data.tokenizer at all.
  EXPECT_NE(manifest.find("\"tokenizer_files\": \"tokenizer\""), std::string::npos) << manifest;
  EXPECT_EQ(read(dir + "/out/tokenizer/tokenizer.json"), read(llama3 + "/tokenizer.json"));
  std::filesystem::rename(dir + "/out", dir + "/moved");
  std::string moved = train;
  moved.replace(moved.find("/out "), 5, "/moved ");
  r = run_kiri(moved);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("data.tokenizer = " + dir +
                          "/moved/tokenizer (the one that made the "
                          "shards in " +
                          dir + "/moved)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step      1/1"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
