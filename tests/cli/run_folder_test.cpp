// kiri train and its run folder, end to end: a used folder is refused, --overwrite starts
// over, --resume auto continues, --resume takes the checkpoint's config (a contradicting
// shape is named), the metrics and the plot cover the whole run; dp is inferred on 2 ranks.
// Issue 25: the start command (a file and --set overrides) resumes; a resume on fewer ranks
// keeps the global batch; data or a tokenizer changed under the same path is refused; a
// batch larger than the data is a config error before the first step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "kiri/data/gpt2_tokenizer.h"
#include "kiri/train/run_dir.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

using kiri::testing::Result;
using kiri::testing::run_kiri;

// A byte-level model of a non-default shape (2 layers of 32) in run folder `dir`.
std::string run_in(const std::string& dir) {
  return " --set data.tokenizer=byte --set model.n_layer=2 --set model.n_embd=32"
         " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
         " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
         " --set run.dir=" +
         dir;
}

std::vector<nlohmann::json> metrics_rows(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<int64_t> steps_of(const std::vector<nlohmann::json>& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r["step"].get<int64_t>());
  return out;
}

bool has(const Result& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

std::string moby_dick(size_t from, size_t n) {
  std::ifstream in(std::string(KIRI_TEST_DATA_DIR) + "/moby-dick.txt", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.substr(from, n);
}

// A byte-level BPE tokenizer.json: the 256 bytes, "ab" and "xy", <|endoftext|> (258), and
// `merges`.
std::string tiny_tokenizer_json(const std::vector<std::string>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  const auto unicode = kiri::data::gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    const char32_t c = unicode[b];
    std::string key;
    if (c < 0x80) {
      key += static_cast<char>(c);
    } else {
      key += static_cast<char>(0xC0 | (c >> 6));
      key += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[key] = b;
  }
  vocab["ab"] = 256;
  vocab["xy"] = 257;
  const nlohmann::json j = {
      {"added_tokens", {{{"id", 258}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

TEST(RunFolder, AFreshRunRefusesAUsedFolderAndOverwriteStartsOver) {
  const std::string dir = kiri::testing::temp_dir("used") + "/run";
  Result r = run_kiri("train" + run_in(dir) + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
  EXPECT_TRUE(fs::exists(dir + "/metrics.png"));
  EXPECT_TRUE(fs::is_directory(dir + "/checkpoints/step_00000002"));
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  EXPECT_EQ(config["model"]["n_layer"], 2);
  EXPECT_EQ(config["parallel"]["dp"], 1);  // resolved
  EXPECT_EQ(config["checkpoint"]["dir"], dir + "/checkpoints");

  r = run_kiri("train" + run_in(dir) + " --set train.steps=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, dir + " already holds a run (checkpoints up to step 2, metrics up to step 2); "
                           "continue it with --resume auto, or start over with --overwrite"))
      << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2}));

  std::ofstream(dir + "/notes.txt") << "the user's";
  r = run_kiri("train" + run_in(dir) + " --set train.steps=3 --overwrite");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "--overwrite: removed " + dir + "/checkpoints/step_00000002")) << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_00000002"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/step_00000003"));
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_EQ(run_kiri("train" + run_in(dir) + " --overwrite --resume auto").code, 2);
}

// One uninterrupted run of 6 steps, and one killed before step 6 (checkpoints every 2, so
// at 2 and 4; metrics rows 1..5) and continued by a bare --resume: the shape comes from
// state.json, row 5 of the killed attempt is dropped, and steps 1..6 have the same losses.
TEST(RunFolder, ABareResumeContinuesANonDefaultShapeExactly) {
  const std::string base = kiri::testing::temp_dir("resume");
  const std::string whole = base + "/whole", parts = base + "/parts";
  Result r = run_kiri("train" + run_in(whole) + " --set train.steps=6");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri("train" + run_in(parts) + " --set train.steps=6 --set checkpoint.every=2",
               "KIRI_FAULT=kill:0:5");
  ASSERT_NE(r.code, 0) << r.output;
  ASSERT_EQ(steps_of(metrics_rows(parts + "/metrics.jsonl")),
            (std::vector<int64_t>{1, 2, 3, 4, 5}));

  r = run_kiri("train --resume " + parts + "/checkpoints --set model.n_layer=3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "model.n_layer = 3 (--set) contradicts the checkpoint's model.n_layer = 2"))
      << r.output;

  r = run_kiri("train --resume " + parts + "/checkpoints");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "at step 4")) << r.output;
  EXPECT_TRUE(has(r, "dropped 1 row(s)")) << r.output;
  const auto a = metrics_rows(whole + "/metrics.jsonl"), b = metrics_rows(parts + "/metrics.jsonl");
  ASSERT_EQ(steps_of(b), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;  // bit-exact
    EXPECT_EQ(a[i]["lr"], b[i]["lr"]) << "step " << i + 1;
  }
  // The plot is drawn from the whole file: both attempts, steps 1..6.
  const auto series =
      kiri::train::loss_plot_series(kiri::train::read_loss_history(parts + "/metrics.jsonl"));
  EXPECT_EQ(series[0].x, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(series[1].x, (std::vector<double>{6}));  // eval_every 0: at the end
  EXPECT_TRUE(fs::exists(parts + "/metrics.png"));
}

TEST(RunFolder, ResumeAutoStartsFreshThenContinues) {
  const std::string dir = kiri::testing::temp_dir("auto") + "/run";
  Result r = run_kiri("train" + run_in(dir) + " --set train.steps=2 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "--resume auto: no checkpoint in " + dir + "/checkpoints: starting fresh"))
      << r.output;
  r = run_kiri("train --set run.dir=" + dir + " --set train.steps=4 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "resumed from " + dir + "/checkpoints/step_00000002 at step 2")) << r.output;
  EXPECT_TRUE(has(r, "step      4/4")) << r.output;
  EXPECT_EQ(steps_of(metrics_rows(dir + "/metrics.jsonl")), (std::vector<int64_t>{1, 2, 3, 4}));
}

// kiri launch -n 2 -- train with parallel.dp unset runs dp 2, and rescales the rates.
TEST(RunFolder, LaunchInfersDpAndScalesTheLearningRate) {
  const std::string dir = kiri::testing::temp_dir("launch") + "/run";
  Result r = run_kiri("launch -n 2 --threads 1 -- train" + run_in(dir) +
                          " --set train.steps=1 --set train.lr_scaling=linear"
                          " --set train.base_batch=2 --set train.lr=1e-3 --set train.min_lr=1e-4"
                          " --set train.warmup=0",
                      "ASAN_OPTIONS=detect_leaks=0");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "layout: dp 2 inferred = world 2 / (tp 1 x pp 1)")) << r.output;
  EXPECT_TRUE(has(r, "lr 0.001 x (4/2) = 0.002")) << r.output;
  const auto rows = metrics_rows(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0]["lr"].get<double>(), 2e-3);
}

// Issue 25 (6d): the README's pattern, a config file whose model and data keys --set
// overrides (n_layer 3 -> 2, gpt2 -> byte): the same command with --resume auto continues;
// only a value that really differs from the checkpoint's is an error, naming its source.
TEST(RunFolder, TheStartCommandWithAFileAndSetOverridesResumes) {
  const std::string base = kiri::testing::temp_dir("same_command");
  const std::string dir = base + "/run", file = base + "/run.json", other = base + "/other.json";
  std::ofstream(file) << R"({"model": {"n_layer": 3}, "data": {"tokenizer": "gpt2"}})";
  std::ofstream(other) << R"({"model": {"n_layer": 3}})";
  const std::string start = "train " + file + run_in(dir);
  Result r = run_kiri(start + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri(start + " --set train.steps=3 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "resumed from " + dir + "/checkpoints/step_00000002 at step 2")) << r.output;
  r = run_kiri(start + " --set train.steps=4 --resume auto --set model.n_layer=4");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "model.n_layer = 4 (--set) contradicts the checkpoint's model.n_layer = 2 (" +
                         dir + "/checkpoints/step_00000003/state.json)"))
      << r.output;
  r = run_kiri("train " + other + " --set run.dir=" + dir + " --resume auto");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "model.n_layer = 3 (the config file " + other +
                         ") contradicts the checkpoint's model.n_layer = 2"))
      << r.output;
}

// Issue 25 (4): a 4-rank run (dp 4 x micro_batch 2 = 8 sequences of 32 tokens per step)
// resumed on 2 ranks keeps 256 tokens per step by train.grad_accum 2, and says so; 3 ranks
// cannot keep 8 sequences exactly: refused with the numbers and the --global-batch to give.
TEST(RunFolder, AResumeOnHalfTheRanksKeepsTheGlobalBatch) {
  const std::string dir = kiri::testing::temp_dir("half") + "/run";
  Result r = run_kiri("launch -n 4 --threads 1 -- train" + run_in(dir) +
                      " --set model.n_layer=1 --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri("launch -n 2 --threads 1 -- train --set run.dir=" + dir +
               " --set train.steps=4 --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r,
                  "--resume: the checkpoint's global batch of 8 sequences kept on 2 rank(s): "
                  "train.grad_accum = 2 on dp 2 (train.grad_accum was 1: 4 sequences per step "
                  "otherwise)"))
      << r.output;
  const auto rows = metrics_rows(dir + "/metrics.jsonl");
  ASSERT_EQ(steps_of(rows), (std::vector<int64_t>{1, 2, 3, 4}));
  for (const auto& row : rows) EXPECT_EQ(row["tokens"], 256) << row.dump();
  r = run_kiri("launch -n 3 --threads 1 -- train --set run.dir=" + dir +
               " --set train.steps=6 --resume auto");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r,
                  "the checkpoint trained with a global batch of 8 sequences, which 3 rank(s) "
                  "cannot keep: train.micro_batch 2 x parallel.microbatches 1 x dp 3 = 6 "
                  "sequences per accumulation step"))
      << r.output;
  EXPECT_TRUE(has(r, "give --global-batch 6 (or 12) to continue with another global batch"))
      << r.output;
}

// Issue 25 (6e): `kiri data` run again into the run's data.dir (the same size of text, other
// bytes) is refused on resume by name; --accept-data-change continues, and says so.
TEST(RunFolder, AResumeRefusesDataChangedUnderTheSamePath) {
  const std::string base = kiri::testing::temp_dir("data_change");
  const std::string dir = base + "/run", text = base + "/text.txt", shards = base + "/shards";
  std::ofstream(text) << moby_dick(0, 20000);
  Result r = run_kiri("data " + text + " --out " + shards + " --tokenizer byte");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string train = "train" + run_in(dir) + " --set data.dir=" + shards;
  r = run_kiri(train + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri(train + " --set train.steps=3 --resume auto");  // unchanged: resumes
  ASSERT_EQ(r.code, 0) << r.output;
  std::ofstream(text) << moby_dick(20000, 20000);
  r = run_kiri("data " + text + " --out " + shards + " --tokenizer byte");
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_kiri(train + " --set train.steps=4 --resume auto");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(
      r, dir + "/checkpoints/step_00000003 was trained on other tokens: the training split of " +
             shards + " changed: "))
      << r.output;
  EXPECT_TRUE(has(r, " tokens hashing to ")) << r.output;
  EXPECT_TRUE(has(r, "give --accept-data-change to continue on these")) << r.output;
  r = run_kiri(train + " --set train.steps=4 --resume auto --accept-data-change");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "--accept-data-change: loading " + dir +
                         "/checkpoints/step_00000003 on other tokens: the training split of "))
      << r.output;
}

// Issue 25 (6e): a tokenizer.json edited in place (a merge added) is refused on resume by
// name, against the hash state.json recorded.
TEST(RunFolder, AResumeRefusesATokenizerChangedUnderTheSamePath) {
  const std::string base = kiri::testing::temp_dir("tokenizer_change");
  const std::string dir = base + "/run", text = base + "/text.txt", tok = base + "/tokenizer.json";
  std::ofstream(text) << moby_dick(0, 20000);
  std::ofstream(tok) << tiny_tokenizer_json({"a b"});
  const std::string train =
      "train" + run_in(dir) + " --set data.tokenizer=" + tok + " --set data.corpus=" + text;
  Result r = run_kiri(train + " --set train.steps=2");
  ASSERT_EQ(r.code, 0) << r.output;
  std::ofstream(tok) << tiny_tokenizer_json({"a b", "x y"});
  r = run_kiri(train + " --set train.steps=3 --resume auto");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(has(r, dir +
                         "/checkpoints/step_00000002 was trained on other tokens: the tokenizer "
                         "data.tokenizer = " +
                         tok + " changed: it was hf-"))
      << r.output;
  EXPECT_TRUE(has(r, "(recorded in " + dir + "/checkpoints/step_00000002/state.json)")) << r.output;
}

// Issue 25 (6g): a micro-batch larger than the training split, and a global batch of more
// than 10 epochs in one step, are config errors before the first step (they were an OOM kill
// at 12 GB, and hours without a line).
TEST(RunFolder, ABatchBeyondTheDataIsAConfigErrorBeforeTheFirstStep) {
  const std::string base = kiri::testing::temp_dir("limits");
  Result r = run_kiri("train" + run_in(base + "/a") +
                      " --set train.micro_batch=100000 --set train.steps=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r,
                  "train.micro_batch = 100000 x dp 1 = 100000 sequences per micro-batch, more "
                  "than the "))
      << r.output;
  EXPECT_TRUE(has(r, " samples of train.seq_len = 32 tokens in the training split of "))
      << r.output;
  EXPECT_FALSE(has(r, "step      1/1")) << r.output;
  r = run_kiri("train" + run_in(base + "/b") + " --global-batch 1000000000 --set train.steps=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r,
                  "one step would read 1000000000 sequences (train.micro_batch 2 x "
                  "parallel.microbatches 1 x train.grad_accum 500000000 x dp 1), more than "
                  "10 epochs of the "))
      << r.output;
  EXPECT_FALSE(has(r, "step      1/1")) << r.output;
}

}  // namespace
