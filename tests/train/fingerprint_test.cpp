// The fingerprints a checkpoint records of its tokenizer and data (fingerprint.h): equal
// data resumes, a changed split or tokenizer file is a data error naming it and both hashes
// (or with --accept-data-change a note), and a checkpoint written before the fingerprints
// compares the tokenizer files with its own copies.
#include "kiri/train/fingerprint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "kiri/base/error.h"
#include "temp_dir.h"

namespace kiri::train {
namespace {

using nlohmann::json;

// A tokenizer read from one file, tokenizer.json at `path`.
class FileTokenizer : public data::ByteTokenizer {
 public:
  explicit FileTokenizer(std::string path) : path_(std::move(path)) {}
  std::string name() const override { return "hf-test"; }
  std::vector<data::TokenizerFile> files() const override { return {{"tokenizer.json", path_}}; }

 private:
  std::string path_;
};

data::Dataset dataset(std::vector<int32_t> train, std::vector<int32_t> val) {
  data::Dataset ds;
  ds.dir = "shards";
  ds.train = data::TokenSource(std::move(train));
  ds.val = data::TokenSource(std::move(val));
  return ds;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Fingerprint, AChangedSplitIsRefusedByNameOrAcceptedWithANote) {
  const json tok = tokenizer_fingerprint(data::ByteTokenizer());
  EXPECT_EQ(tok, (json{{"name", "byte"}, {"files", json::object()}}));
  const json before = data_fingerprint(dataset({1, 2, 3, 4}, {5, 6}));
  const json recorded = {{"tokenizer", tok}, {"data", before}};
  EXPECT_EQ(check_fingerprints(recorded, tok, before, "ck/step_2", "byte", false), "");
  EXPECT_EQ(before["train"]["tokens"], 4);
  const json after = data_fingerprint(dataset({1, 2, 3, 7}, {5, 6}));  // one token differs
  EXPECT_NE(after["train"]["hash"], before["train"]["hash"]);
  EXPECT_EQ(after["val"], before["val"]);
  const std::string m =
      refusal([&] { check_fingerprints(recorded, tok, after, "ck/step_2", "byte", false); });
  EXPECT_TRUE(
      has(m,
          "ck/step_2 was trained on other tokens: the training split of shards changed: 4 tokens "
          "hashing to " +
              before["train"]["hash"].get<std::string>() + " then, 4 tokens hashing to " +
              after["train"]["hash"].get<std::string>() + " now"))
      << m;
  EXPECT_FALSE(has(m, "validation split")) << m;
  EXPECT_TRUE(has(m, "--accept-data-change")) << m;
  const std::string note = check_fingerprints(recorded, tok, after, "ck/step_2", "byte", true);
  EXPECT_TRUE(has(note,
                  "--accept-data-change: loading ck/step_2 on other tokens: the training "
                  "split of shards changed"))
      << note;
}

TEST(Fingerprint, ATokenizerFileIsComparedWithTheRecordOrTheCheckpointsCopy) {
  const std::string dir = kiri::testing::temp_dir("tokenizer");
  const std::string file = dir + "/tokenizer.json", ckpt = dir + "/step_2";
  std::filesystem::create_directories(ckpt);
  std::ofstream(file) << R"({"model": "one"})";
  std::ofstream(ckpt + "/tokenizer.json") << R"({"model": "one"})";  // the checkpoint's copy
  const FileTokenizer tokenizer(file);
  const json data = data_fingerprint(dataset({1, 2}, {3, 4}));
  const json recorded = {{"tokenizer", tokenizer_fingerprint(tokenizer)}, {"data", data}};
  EXPECT_EQ(check_fingerprints(recorded, tokenizer_fingerprint(tokenizer), data, ckpt, file, false),
            "");
  EXPECT_EQ(check_fingerprints(json(), tokenizer_fingerprint(tokenizer), data, ckpt, file, false),
            "");                                 // no record: the copy agrees
  std::ofstream(file) << R"({"model": "two"})";  // edited under the same path
  const json now = tokenizer_fingerprint(tokenizer);
  std::string m = refusal([&] { check_fingerprints(recorded, now, data, ckpt, file, false); });
  EXPECT_TRUE(has(m, "the tokenizer data.tokenizer = " + file +
                         " changed: its tokenizer.json "
                         "hashed to " +
                         recorded["tokenizer"]["files"]["tokenizer.json"].get<std::string>() +
                         " (recorded in " + ckpt + "/state.json), it hashes to " +
                         now["files"]["tokenizer.json"].get<std::string>() + " now"))
      << m;
  m = refusal([&] { check_fingerprints(json(), now, data, ckpt, file, false); });
  EXPECT_TRUE(has(m, "(the copy in " + ckpt + ")")) << m;
}

}  // namespace
}  // namespace kiri::train
