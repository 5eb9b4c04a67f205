// Hostile inputs through the kiri binary (issue 12, items 1, 2, 7 and 8): deeply nested
// JSON, FIFOs and directories where files belong, state.json values kiri cannot have
// written, duplicate config keys, out-of-range options, huge pointers. Each is a named
// error with the right exit code, a bounded message and an exit within seconds; stale
// temporary checkpoint folders are cleaned at the next start.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/checkpoint_edit.h"
#include "cli/run_kiri.h"
#include "kiri/ckpt/safetensors.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny =
    " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
    " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=4"
    " --set log.metrics= --set train.warmup=1";

// Runs kiri and checks the exit code, that every part is in the output, that the output
// stays short (no message quotes its input whole) and that it ends within 10 s.
std::string expect_exit(const std::string& args, int code, const std::vector<std::string>& parts) {
  const auto t0 = std::chrono::steady_clock::now();
  // Under timeout(1): a regression that blocks (on a FIFO, say) fails with 124, not a hang.
  const kiri::testing::Result r = kiri::testing::run_kiri(args, "timeout 15 env");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, code) << args << "\n" << r.output.substr(0, 2000);
  for (const std::string& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << args << "\n" << r.output.substr(0, 2000);
  EXPECT_LT(r.output.size(), 4000u) << args << "\n" << r.output.substr(0, 2000);
  EXPECT_LT(s, 10.0) << args;
  return r.output;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');

// One tiny 2-step run shared by the checkpoint cases; each case tampers with a copy.
class HostileInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = kiri::testing::temp_dir("suite");
    const kiri::testing::Result r = kiri::testing::run_kiri(
        "train" + kTiny + " --set train.steps=2 --set run.dir=" + root_ + "/run");
    ASSERT_EQ(r.code, 0) << r.output;
    step_ = root_ + "/run/checkpoints/step_00000002";
    ASSERT_TRUE(fs::exists(step_ + "/state.json")) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A copy of the checkpoint's step folder named `name`.
  static std::string copy_step(const std::string& name) {
    const std::string dir = root_ + "/" + name;
    fs::remove_all(dir);
    fs::copy(step_, dir, fs::copy_options::recursive);
    return dir;
  }
  // A copy whose state.json `change` edited.
  static std::string with_state(const std::string& name, const std::function<void(json&)>& change) {
    const std::string dir = copy_step(name);
    json state = json::parse(read_text(dir + "/state.json"));
    change(state);
    write_text(dir + "/state.json", state.dump(2));
    return dir;
  }

  static std::string root_, step_;
};
std::string HostileInputs::root_, HostileInputs::step_;

TEST_F(HostileInputs, DeeplyNestedConfigFilesAreRefused) {
  const std::string cfg = root_ + "/deep.json";
  write_text(cfg, kDeep);  // 100,000 levels: crashed with SIGSEGV in dump()
  expect_exit("config " + cfg, 2, {"config error", "nests more than 64 levels deep"});
  expect_exit("train " + cfg + " --set run.dir=" + root_ + "/deep_run", 2,
              {"nests more than 64 levels deep"});
  write_text(cfg, "{\"train\": " + std::string(64, '[') + std::string(64, ']') + "}");
  expect_exit("config " + cfg, 2, {"nests more than 64"});
  write_text(cfg, "{\"train\": {\"lr\": " + std::string(62, '[') + std::string(62, ']') + "}}");
  expect_exit("config " + cfg, 2, {"train.lr must be a number"});  // parsed, then judged
}

TEST_F(HostileInputs, ConfigFilesThatAreNotRegularFilesDoNotBlock) {
  const std::string fifo = root_ + "/cfg.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_exit("config " + fifo, 2, {"config file " + fifo + " is a FIFO"});
  expect_exit("train " + fifo + " --set run.dir=" + root_ + "/fifo_cfg_run", 2, {"is a FIFO"});
  expect_exit("config " + root_, 2, {"is a directory"});
  expect_exit("config /dev/zero", 2, {"is a character device"});
}

TEST_F(HostileInputs, DuplicateConfigKeysAreNamed) {
  const std::string cfg = root_ + "/dup.json";
  write_text(cfg, "{\"train\": {\"lr\": 0.001, \"lr\": 0.002}}");
  expect_exit("config " + cfg, 2, {"key 'train.lr' appears twice"});
  expect_exit("train " + cfg + " --set run.dir=" + root_ + "/dup_run", 2,
              {"key 'train.lr' appears twice"});
  write_text(cfg, "{\"train.lr\": 0.001, /* both spellings */ \"train\": {\"lr\": 0.002}}");
  expect_exit("config " + cfg, 2, {"key 'train.lr' is given twice (once flat, once nested)"});
  write_text(cfg, "{\"model\": {\"n_layer\": 2}, \"model\": {\"n_embd\": 64}}");
  expect_exit("config " + cfg, 2, {"key 'model' appears twice"});
}

TEST_F(HostileInputs, StateJsonValuesKiriCannotHaveWrittenAreNamed) {
  struct Case {
    std::function<void(json&)> change;
    std::string part;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["step"] = -5; }, "step must be an integer in [0, 1099511627776], got -5"},
      {[](json& j) { j["step"] = 10.5; }, "got 10.5"},
      {[](json& j) { j["step"] = UINT64_MAX; }, "got 18446744073709551615"},
      {[](json& j) { j["data"]["position"] = -3; }, "data.position must be a non-negative"},
      {[](json& j) { j["optimizer_step"] = "many"; }, "optimizer_step must be an integer"},
      {[](json& j) { j["optimizer_files"] = {"../../x.safetensors"}; }, "not the name of a file"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string dir = with_state("state_" + std::to_string(i), cases[i].change);
    expect_exit("eval " + dir, 1, {"checkpoint error", dir + "/state.json", cases[i].part});
  }
  const std::string dir = with_state("state_resume", [](json& j) { j["step"] = -5; });
  expect_exit("train" + kTiny + " --set train.steps=3 --set run.dir=" + root_ +
                  "/resume_run --resume " + dir,
              1, {"step must be an integer", "got -5"});
}

TEST_F(HostileInputs, DeeplyNestedStateJsonIsRefusedEverywhere) {
  const std::string whole = copy_step("deep_whole");
  write_text(whole + "/state.json", kDeep);
  const std::string in_config = copy_step("deep_config");
  std::string text = read_text(in_config + "/state.json");
  const size_t at = text.find("\"config\": ");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 10, "{\"x\": " + kDeep + ", \"y\": ");
  text.insert(text.find("\"data\": {"), "} ,");  // the old config becomes "y"
  write_text(in_config + "/state.json", text);
  for (const std::string& dir : {whole, in_config}) {
    expect_exit("eval " + dir, 1, {"state.json nests more than 64 levels deep"});
    expect_exit("sample " + dir + " --tokens 2", 1, {"nests more than 64 levels deep"});
    expect_exit("train" + kTiny + " --set run.dir=" + root_ + "/deep_resume --resume " + dir, 1,
                {"nests more than 64 levels deep"});
  }
}

TEST_F(HostileInputs, SegmentsThatOverflowAreNamed) {
  const std::string dir = copy_step("segments");
  const std::string path = dir + "/optimizer-00000-of-00001.safetensors";
  std::map<std::string, std::string> meta;
  std::vector<kiri::ckpt::NamedTensor> tensors;
  kiri::Allocator alloc;
  {
    kiri::ckpt::SafetensorsFile file = kiri::ckpt::SafetensorsFile::open(path);
    meta = file.metadata();
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      const kiri::Tensor t = file.get(name);
      kiri::Tensor copy = kiri::Tensor::empty(t.shape(), t.dtype(), kiri::Category::kOther, alloc);
      copy.copy_from(t);
      tensors.push_back({name, copy});
    }
  }
  json segs = json::parse(meta.at("segments"));
  segs[0][1] = INT64_MAX - 1;  // begin + count overflows int64: was silently ignored
  meta["segments"] = segs.dump();
  kiri::ckpt::save_safetensors(path, tensors, meta);
  kiri::testing::reseal_checkpoint(dir);  // the manifest would name the new header first
  expect_exit("eval " + dir, 1, {path, "begin + count overflows"});
  segs[0][1] = 0;
  segs[0][3] = -4;
  meta["segments"] = segs.dump();
  kiri::ckpt::save_safetensors(path, tensors, meta);
  kiri::testing::reseal_checkpoint(dir);
  expect_exit("eval " + dir, 1, {path, "holds a negative number"});
}

TEST_F(HostileInputs, BadLatestPointersAreNamedBriefly) {
  const std::string root = root_ + "/pointer";
  fs::create_directories(root);
  fs::remove_all(root + "/step_00000002");
  fs::copy(step_, root + "/step_00000002", fs::copy_options::recursive);
  fs::copy(step_, root + "/.step_00000004.tmp", fs::copy_options::recursive);
  write_text(root + "/latest", ".step_00000004.tmp\n");
  expect_exit("eval " + root, 1, {"holds '.step_00000004.tmp', not the name of a step directory"});
  write_text(root + "/latest", std::string(50 << 20, 's'));  // printed ~100 MB before
  expect_exit("eval " + root, 1, {"52428800 bytes, more than the 4096 allowed"});
  fs::remove(root + "/latest");
  ASSERT_EQ(::mkfifo((root + "/latest").c_str(), 0600), 0);
  expect_exit("eval " + root, 1, {"latest is a FIFO"});
  fs::remove(root + "/latest");
  write_text(root + "/latest", "step_00000002\n");
  expect_exit("eval " + root, 0, {"val_loss", "(step 2)"});
  const std::string fifo_state = copy_step("fifo_state");
  fs::remove(fifo_state + "/state.json");
  ASSERT_EQ(::mkfifo((fifo_state + "/state.json").c_str(), 0600), 0);
  expect_exit("eval " + fifo_state, 1, {"state.json is a FIFO"});
  expect_exit("sample " + fifo_state, 1, {"state.json is a FIFO"});
}

TEST_F(HostileInputs, OutOfRangeOptionsAreConfigErrors) {
  for (const std::string n : {"0", "-1"})
    expect_exit("eval " + step_ + " --batches " + n, 2, {"--batches must be in [1, 1048576]"});
  expect_exit("eval " + step_ + " --batches 99999999999999999999", 2,
              {"--batches must be an integer"});
  expect_exit("eval " + step_ + " --batches 2", 0, {"val_loss"});
  expect_exit("sample " + step_ + " --top-k 1099511627776", 2, {"--top-k must be in [0, 257]"});
  expect_exit("sample " + step_ + " --seed -1", 2, {"--seed must not be negative"});
  expect_exit("sample " + step_ + " --seed 99999999999999999999", 2, {"--seed must be an integer"});
  expect_exit("sample " + step_ + " --tokens 1099511627776", 2, {"--tokens must be in [0, "});
  expect_exit("sample " + step_ + " --temperature nan", 2, {"--temperature must be a finite"});
  const std::string big = " --mem-limit 99999999999999999999TiB";
  expect_exit("train" + kTiny + big + " --set run.dir=" + root_ + "/mem", 2,
              {"byte size '99999999999999999999TiB' is more than the 1 EiB"});
  expect_exit("train --dry-run" + kTiny + big + " --set run.dir=" + root_ + "/mem", 2,
              {"more than the 1 EiB"});
}

TEST_F(HostileInputs, StaleTempFoldersAreRemovedAtTheNextStart) {
  const std::string run = root_ + "/stale";
  const std::string train = "train" + kTiny + " --set run.dir=" + run;
  expect_exit(train + " --set train.steps=2", 0, {"saved checkpoint"});
  const std::string ck = run + "/checkpoints";
  // What a kill during the save of step 4 leaves, and entries that are not the protocol's.
  fs::create_directories(ck + "/.step_00000004.tmp");
  write_text(ck + "/.step_00000004.tmp/model.safetensors", "half a file");
  fs::create_directories(ck + "/.step_00000003.old");
  fs::create_directories(ck + "/notes.tmp");
  const std::string out = expect_exit(
      train + " --set train.steps=3 --resume auto", 0,
      {"removed " + ck + "/.step_00000004.tmp, left by a save", "resumed from", "at step 2"});
  EXPECT_FALSE(fs::exists(ck + "/.step_00000004.tmp")) << out;
  EXPECT_TRUE(fs::exists(ck + "/.step_00000003.old"));
  EXPECT_TRUE(fs::exists(ck + "/notes.tmp"));
  EXPECT_TRUE(fs::exists(ck + "/step_00000003/state.json"));
}

TEST_F(HostileInputs, CorpusTextsThatAreNotRegularFilesAndEmptySplitsAreNamed) {
  const std::string fifo = root_ + "/corpus.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_exit("data " + fifo + " --out " + root_ + "/corpus_out --tokenizer byte", 1,
              {"corpus text " + fifo + " is a FIFO"});
  expect_exit(
      "train" + kTiny + " --set data.corpus=" + fifo + " --set run.dir=" + root_ + "/fifo_run", 1,
      {"is not a regular file"});
  // 17 validation tokens hold no 33-token sample: named, not val_loss -nan.
  const std::string small = root_ + "/small.txt";
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Call me Ishmael. ";
  write_text(small, text);
  expect_exit("train" + kTiny + " --set data.corpus=" + small +
                  " --set data.val_fraction=0.05 --set train.steps=1 --set run.dir=" + root_ +
                  "/small_run",
              1, {"validation split", "17 tokens", "shorter than one sample", "33"});
}

}  // namespace
