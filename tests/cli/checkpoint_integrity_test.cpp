// Checkpoints you can trust (docs/checkpoints.md, "Integrity"): a flipped bit in any file of
// a step folder, a file of another step copied in, an edited state.json and an impossible
// optimizer state are each named, with the file and the tensor, on every verb that reads
// them; `--resume auto` finds the newest complete step folder when a save was killed before
// `latest`. Each with synchronous and asynchronous saves.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "kiri/base/atomic_file.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/safetensors.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;
using nlohmann::json;

constexpr const char* kOptimizer = "optimizer-00000-of-00001.safetensors";
constexpr const char* kTensor = "transformer.h.0.mlp.c_fc.weight";

using kiri::testing::temp_dir;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tiny run's flags: checkpoints every 5 steps into dir/ck, all kept.
std::string run_flags(const std::string& dir, bool async, int steps) {
  return " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
         " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
         " --set train.warmup=1 --set train.eval_every=0 --set train.eval_batches=1"
         " --set checkpoint.every=5 --set checkpoint.keep_last=0 --set checkpoint.async=" +
         std::string(async ? "true" : "false") + " --set train.steps=" + std::to_string(steps) +
         " --set run.dir=" + dir + " --set checkpoint.dir=" + dir + "/ck";
}

// Flips bit `bit` of byte `offset` of the file.
void flip(const std::string& path, uint64_t offset, int bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// The file offset of element `element` of tensor `name` in a safetensors file.
uint64_t offset_of(const std::string& path, const std::string& name, uint64_t element) {
  const std::string text = read_text(path);
  uint64_t n = 0;
  std::memcpy(&n, text.data(), 8);
  const json header = json::parse(text.substr(8, n));
  return 8 + n + header.at(name).at("data_offsets")[0].get<uint64_t>() + 4 * element;
}

// One run of 10 steps (step_00000005 and step_00000010), made once per mode and copied for
// each case, so that every case starts from an intact folder.
class Integrity : public ::testing::TestWithParam<bool> {
 protected:
  static std::string pristine(bool async) {
    static std::string dirs[2];
    std::string& dir = dirs[async];
    if (dir.empty()) {
      dir = temp_dir(async ? "pristine_async" : "pristine_sync");
      const Result r = run_kiri("train" + run_flags(dir, async, 10));
      EXPECT_EQ(r.code, 0) << r.output;
    }
    return dir;
  }
  // A fresh copy of the pristine run; returns its folder.
  std::string copy(const std::string& name) {
    const std::string dir = temp_dir(name + (GetParam() ? "_async" : "_sync"));
    fs::remove_all(dir);
    fs::copy(pristine(GetParam()), dir, fs::copy_options::recursive);
    return dir;
  }
  std::string step10(const std::string& dir) { return dir + "/ck/step_00000010"; }

  // Every verb that reads the checkpoint at dir's step 10 (and the files `verbs` names): each
  // must fail with a message containing every needle.
  void expect_named(const std::string& dir, const std::vector<std::string>& verbs,
                    const std::vector<std::string>& needles) {
    const std::string ck = step10(dir);
    for (const std::string& verb : verbs) {
      std::string args;
      if (verb == "resume")
        args = "train" + run_flags(dir, GetParam(), 12) + " --resume " + ck;
      else if (verb == "eval")
        args = "eval " + ck + " --batches 1";
      else if (verb == "sample")
        args = "sample " + ck + " --prompt a --tokens 2 --temperature 0";
      else if (verb == "export")
        args = "export " + ck + " --out " + dir + "/hf";
      else
        args = "train" + run_flags(dir + "/init", GetParam(), 1) + " --init-from " + ck;
      const Result r = run_kiri(args);
      EXPECT_NE(r.code, 0) << verb << ": " << args << "\n" << r.output;
      for (const std::string& needle : needles)
        EXPECT_NE(r.output.find(needle), std::string::npos)
            << verb << " does not say '" << needle << "':\n"
            << r.output;
    }
  }
};

const std::vector<std::string> kAllVerbs = {"resume", "eval", "sample", "export", "init-from"};

TEST_P(Integrity, AFlippedBitInTheModelIsNamedOnEveryVerb) {
  const std::string dir = copy("model_bit");
  const std::string model = step10(dir) + "/model.safetensors";
  flip(model, offset_of(model, kTensor, 77), 4);
  expect_named(dir, kAllVerbs,
               {"safetensors file " + model + ": tensor '" + kTensor + "' fails its checksum"});
}

TEST_P(Integrity, EveryFileCarriesChecksumsAndExportsToo) {
  const std::string dir = copy("export");
  const kiri::ckpt::SafetensorsFile model =
      kiri::ckpt::SafetensorsFile::open(step10(dir) + "/model.safetensors");
  EXPECT_TRUE(model.has_checksums());
  EXPECT_EQ(model.metadata().at("kiri.step"), "10");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  const kiri::ckpt::SafetensorsFile opt =
      kiri::ckpt::SafetensorsFile::open(step10(dir) + "/" + kOptimizer);
  EXPECT_TRUE(opt.has_checksums());
  EXPECT_EQ(opt.metadata().at("kiri.step"), "10");
  const json state = json::parse(read_text(step10(dir) + "/state.json"));
  EXPECT_EQ(state["checksum"].get<std::string>().rfind("xxh3_64:", 0), 0u) << state.dump();
  for (const char* f : {"model.safetensors", "config.json", kOptimizer})
    EXPECT_TRUE(state["files"].contains(f)) << f << " " << state["files"].dump();
  EXPECT_EQ(state["files"]["model.safetensors"]["step"], "10");
  const Result r = run_kiri("export " + step10(dir) + " --out " + dir + "/hf --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  const kiri::ckpt::SafetensorsFile hf =
      kiri::ckpt::SafetensorsFile::open(dir + "/hf/model.safetensors");
  EXPECT_TRUE(hf.has_checksums());
  EXPECT_EQ(hf.metadata().at("format"), "pt");
  EXPECT_EQ(hf.metadata().count("kiri.step"), 0u);
  for (const std::string& name : hf.names()) hf.verify(name);
}

TEST_P(Integrity, AFlippedBitInTheOptimizerStatesIsNamedOnTheVerbsThatReadThem) {
  const std::string dir = copy("optimizer_bit");
  const std::string opt = step10(dir) + "/" + kOptimizer;
  flip(opt, offset_of(opt, "exp_avg", 5), 6);
  expect_named(dir, {"resume", "eval"},
               {"safetensors file " + opt + ": tensor 'exp_avg' fails its checksum"});
}

TEST_P(Integrity, AFlippedBitInStateJsonIsNamedOnEveryVerb) {
  const std::string dir = copy("state_bit");
  const std::string state = step10(dir) + "/state.json";
  const std::string text = read_text(state);
  // "step": 10 -> "step": 30 (one bit of the digit 1): still valid JSON.
  const size_t at = text.find("\"step\": 10");
  ASSERT_NE(at, std::string::npos) << text;
  flip(state, at + 8, 1);
  expect_named(dir, kAllVerbs,
               {state + " fails its checksum", "(the file was edited or is damaged)"});
}

TEST_P(Integrity, AnotherStepsFileCopiedInIsNamed) {
  const std::string dir = copy("swap_model");
  fs::copy_file(dir + "/ck/step_00000005/model.safetensors", step10(dir) + "/model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_named(
      dir, kAllVerbs,
      {step10(dir) +
       "/model.safetensors is the file of step 5 (its 'kiri.step' metadata), "
       "but " +
       step10(dir) + "/state.json is step 10: a file of another checkpoint was copied in"});
  const std::string dir2 = copy("swap_optimizer");
  fs::copy_file(dir2 + "/ck/step_00000005/" + kOptimizer, step10(dir2) + "/" + kOptimizer,
                fs::copy_options::overwrite_existing);
  expect_named(dir2, {"resume", "eval", "sample", "export"},
               {step10(dir2) + "/" + kOptimizer + " is the file of step 5"});
}

// state.json with `edit` applied and written back as the writer does (its checksum no longer
// holds); with `unsealed`, also without its checksum and manifest, as an older kiri's.
void edit_state(const std::string& ck, const std::function<void(json&)>& edit, bool unsealed) {
  json s = json::parse(read_text(ck + "/state.json"));
  edit(s);
  if (unsealed) {
    s.erase("checksum");
    s.erase("files");
  }
  kiri::write_file_atomic(ck + "/state.json", s.dump(2) + "\n");
}

TEST_P(Integrity, EditedStateFieldsAreNamed) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> edits = {
      {"step", [](json& s) { s["step"] = 11; }},
      {"optimizer_step", [](json& s) { s["optimizer_step"] = 9; }},
      {"position", [](json& s) { s["data"]["position"] = 4; }}};
  for (const auto& [what, edit] : edits) {
    const std::string dir = copy("edit_" + what);
    edit_state(step10(dir), edit, false);
    expect_named(dir, {"resume"}, {step10(dir) + "/state.json fails its checksum"});
    // Without the checksum and manifest (as an older kiri wrote it), the optimizer file's own
    // record names the edit.
    edit_state(
        step10(dir), [](json&) {}, true);
    const std::string field = what == "step" ? "kiri.step = 10, but state.json says step = 11"
                              : what == "optimizer_step"
                                  ? "step = 10, but state.json says optimizer_step = 9"
                                  : "kiri.data_position = ";
    expect_named(dir, {"resume"}, {step10(dir) + "/" + kOptimizer + " records ", field});
  }
}

TEST_P(Integrity, ANegativeSecondMomentIsNamedAtLoad) {
  const std::string dir = copy("negative_v");
  const std::string ck = step10(dir), opt = ck + "/" + kOptimizer;
  {
    // Rewritten as kiri's own writer would write a damaged state: checksums and manifest
    // hold, so only the value itself can give it away.
    const kiri::ckpt::SafetensorsFile f = kiri::ckpt::SafetensorsFile::open(opt);
    kiri::Allocator alloc;
    std::vector<kiri::ckpt::NamedTensor> tensors;
    for (const std::string& name : f.names()) {
      kiri::Tensor t =
          kiri::Tensor::empty(f.info(name).shape, kiri::DType::kF32, kiri::Category::kOther, alloc);
      f.read_into(name, t);
      if (name == "exp_avg_sq") t.data<float>()[3] = -0.25f;
      tensors.push_back({name, t});
    }
    std::map<std::string, std::string> meta;
    for (const auto& [k, v] : f.metadata())
      if (k.rfind("kiri.xxh3_64.", 0) != 0 && k != "kiri.checksum") meta[k] = v;
    kiri::ckpt::save_safetensors(opt, tensors, meta, kiri::ckpt::Checksums::kXxh3);
  }
  json s = json::parse(read_text(ck + "/state.json"));
  s.erase("checksum");
  s.erase("files");
  kiri::ckpt::write_checkpoint_state(ck, s.dump());
  expect_named(dir, {"resume", "eval"},
               {opt + ": tensor exp_avg_sq holds a negative value (-0.25) at element 3 of ",
                "a second moment is a mean of squares"});
}

TEST_P(Integrity, ResumeAutoTakesTheNewestCompleteFolderWhenLatestIsMissingOrIncomplete) {
  // A save killed between its step folder's rename and the write of `latest`: the folder is
  // complete, `latest` missing (the first save) or naming the previous one.
  const std::string dir = copy("no_latest");
  fs::remove(dir + "/ck/latest");
  fs::remove_all(dir + "/ck/step_00000010");
  Result r = run_kiri("train" + run_flags(dir, GetParam(), 10) + " --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--resume auto: there is no " + dir + "/ck/latest: resuming from " + dir +
                          "/ck/step_00000005, the newest complete checkpoint"),
            std::string::npos)
      << r.output;
  // The same model as the run that was never interrupted.
  EXPECT_EQ(read_text(step10(dir) + "/model.safetensors"),
            read_text(step10(pristine(GetParam())) + "/model.safetensors"));
  EXPECT_EQ(read_text(step10(dir) + "/" + kOptimizer),
            read_text(step10(pristine(GetParam())) + "/" + kOptimizer));

  // A later save killed the same way: `latest` still names step 5, step 10 is complete and
  // was committed over it.
  const std::string dir3 = copy("stale_latest");
  kiri::write_file_atomic(dir3 + "/ck/latest", "step_00000005\n");
  r = run_kiri("train" + run_flags(dir3, GetParam(), 12) + " --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(dir3 + "/ck/latest names " + dir3 + "/ck/step_00000005, but " + dir3 +
                          "/ck/step_00000010 was committed after it"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(json::parse(read_text(dir3 + "/ck/step_00000012/state.json"))["step"], 12);

  // `latest` names a folder whose file is damaged: the newest one that verifies is taken.
  const std::string dir2 = copy("bad_latest");
  fs::resize_file(step10(dir2) + "/config.json", 10);
  r = run_kiri("train" + run_flags(dir2, GetParam(), 10) + " --resume auto");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(
      r.output.find(step10(dir2) + "/config.json is 10 bytes, but state.json's manifest says "),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resuming from " + dir2 + "/ck/step_00000005, the newest complete"),
            std::string::npos)
      << r.output;
}

// A kill before each fsync of the first save (KIRI_FAULT=fsync:0:N), up to the one that
// makes `latest` durable: `--resume auto` then finishes with the uninterrupted run's model.
class IntegritySlow : public Integrity {};

TEST_P(IntegritySlow, AKillAtEachFsyncOfTheFirstSaveResumes) {
  const std::string reference = temp_dir(GetParam() ? "ref_async" : "ref_sync");
  ASSERT_EQ(run_kiri("train" + run_flags(reference, GetParam(), 6)).code, 0);
  int window = 0;     // kills that left a complete step folder but no `latest`
  std::string kills;  // what each kill hit, for a failure's message
  for (int n = 1; n <= 80; ++n) {
    const std::string dir = temp_dir("kill_" + std::to_string(n) + (GetParam() ? "a" : "s"));
    const Result killed = run_kiri("train" + run_flags(dir, GetParam(), 6),
                                   "KIRI_FAULT=fsync:0:" + std::to_string(n));
    ASSERT_NE(killed.code, 0) << "fsync " << n << " was never reached:\n" << killed.output;
    const bool committed = fs::exists(dir + "/ck/latest");
    const bool folder = fs::exists(dir + "/ck/step_00000005");
    window += !committed && folder;
    const size_t at = killed.output.find("KIRI_FAULT: killing");
    kills +=
        std::to_string(n) + ": " +
        (at == std::string::npos ? "no kill line"
                                 : killed.output.substr(at, killed.output.find('\n', at) - at)) +
        (folder ? ", step folder" : "") + (committed ? ", latest" : "") + "\n";
    const Result r = run_kiri("train" + run_flags(dir, GetParam(), 6) + " --resume auto");
    ASSERT_EQ(r.code, 0) << "after a kill before fsync " << n << ":\n" << r.output;
    EXPECT_EQ(read_text(dir + "/ck/step_00000006/model.safetensors"),
              read_text(reference + "/ck/step_00000006/model.safetensors"))
        << "after a kill before fsync " << n;
    fs::remove_all(dir);
    if (committed) break;  // the first save is complete
  }
  EXPECT_GE(window, 1) << "no kill landed between the step folder's rename and `latest`:\n"
                       << kills;
}

INSTANTIATE_TEST_SUITE_P(Saves, IntegritySlow, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "async" : "sync"; });

INSTANTIATE_TEST_SUITE_P(Saves, Integrity, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "async" : "sync"; });

}  // namespace
