// kiri config --deepspeed and kiri train --deepspeed, end to end: the resolved config is
// printed, the keys with no effect are said on stderr, an unsupported key fails the command
// before any work, and a short run of a tiny model trains with the DeepSpeed file's batch,
// ZeRO stage and WarmupDecayLR rates (read back from its metrics).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"

namespace {

using kiri::testing::Result;
using kiri::testing::run_kiri;
using nlohmann::json;

bool has(const Result& r, const std::string& needle) {
  return r.output.find(needle) != std::string::npos;
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The JSON that `kiri config` printed: from its first line "{" to its last "}" (the notes
// are [kiri] lines on stderr).
json printed_config(const std::string& output) {
  const size_t begin = output.find("{\n"), end = output.rfind("\n}");
  EXPECT_NE(begin, std::string::npos) << output;
  return json::parse(output.substr(begin, end + 2 - begin));
}

const char* kRunConfig = R"({
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "train_batch_size": 4,
  "gradient_clipping": 0.5,
  "steps_per_print": 2000,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.99], "eps": 1e-8,
                                            "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                "warmup_num_steps": 2, "total_num_steps": 4, "warmup_type": "linear"}},
  "zero_optimization": {"stage": 1, "overlap_comm": true, "reduce_bucket_size": "auto"},
  "wall_clock_breakdown": false
})";

TEST(DeepSpeedCli, ConfigPrintsTheResolvedConfig) {
  const std::string dir = kiri::testing::temp_dir("config");
  const std::string ds = write(dir, "ds.json", kRunConfig);
  const Result r = run_kiri("config --deepspeed " + ds + " --set train.seq_len=64");
  ASSERT_EQ(r.code, 0) << r.output;
  const json c = printed_config(r.output);
  EXPECT_EQ(c["train"]["micro_batch"], 2);
  EXPECT_EQ(c["train"]["grad_accum"], 2);
  EXPECT_EQ(c["train"]["grad_clip"], 0.5);
  EXPECT_EQ(c["train"]["lr"], 1e-3);
  EXPECT_EQ(c["train"]["beta2"], 0.99);
  EXPECT_EQ(c["train"]["weight_decay"], 0.01);
  EXPECT_EQ(c["train"]["lr_schedule"], "ds_warmup_decay");
  EXPECT_EQ(c["train"]["warmup"], 2);
  EXPECT_EQ(c["train"]["decay_steps"], 4);
  EXPECT_EQ(c["train"]["warmup_type"], "linear");
  EXPECT_EQ(c["train"]["seq_len"], 64);  // --set
  EXPECT_EQ(c["parallel"]["zero_stage"], 1);
  EXPECT_EQ(c["log"]["every"], 1);  // kiri's: steps_per_print is DeepSpeed's console interval
  EXPECT_TRUE(has(r, "--deepspeed " + ds + ": zero_optimization.overlap_comm: no effect in kiri"))
      << r.output;
  EXPECT_TRUE(has(r, "--deepspeed " + ds + ": steps_per_print: no effect in kiri")) << r.output;
}

// ZeRO-Infinity's keys print as kiri's offload.* keys; DeepSpeed's "cpu" is where the states
// are already (kiri's none, with a note), and kiri's own offload.* = cpu fails with the reason,
// exit code 2, before any work.
TEST(DeepSpeedCli, OffloadKeysPrintAsKirisAndCpuIsHostMemory) {
  const std::string dir = kiri::testing::temp_dir("offload");
  const std::string nvme = write(dir, "nvme.json", R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": true},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}},
      "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 1}})");
  Result r = run_kiri("config --deepspeed " + nvme);
  ASSERT_EQ(r.code, 0) << r.output;
  const json c = printed_config(r.output);
  EXPECT_EQ(c["offload"]["optimizer"], "nvme");
  EXPECT_EQ(c["offload"]["parameters"], "nvme");
  EXPECT_EQ(c["offload"]["path"], "/local_nvme");
  EXPECT_EQ(c["offload"]["block_size"], "262144");
  EXPECT_EQ(c["offload"]["queue_depth"], 16);
  EXPECT_TRUE(has(r, "zero_optimization.offload_optimizer.pin_memory: no effect in kiri"))
      << r.output;
  EXPECT_TRUE(has(r, "aio.thread_count: no effect in kiri")) << r.output;
  const std::string cpu = write(dir, "cpu.json", R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  r = run_kiri("config --deepspeed " + cpu);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(printed_config(r.output)["offload"]["optimizer"], "none");
  EXPECT_TRUE(has(r,
                  "zero_optimization.offload_optimizer.device: no effect in kiri (\"cpu\": on "
                  "the CPU backend the optimizer states already live in host RAM)"))
      << r.output;
  r = run_kiri("train --set offload.optimizer=cpu --set run.dir=" + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r,
                  "offload.optimizer = cpu: on the CPU backend host memory is already where the "
                  "optimizer states are"))
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run")) << "refused before the run folder";
  r = run_kiri("config --set offload.parameters=nvme --set parallel.zero_stage=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r, "2 problems with the offload.* keys")) << r.output;
  EXPECT_TRUE(has(r, "offload.parameters = nvme needs ZeRO stage 3")) << r.output;
  EXPECT_TRUE(has(r, "needs offload.optimizer = nvme too, got offload.optimizer = none"))
      << r.output;
}

TEST(DeepSpeedCli, AnUnsupportedKeyOrAContradictionFailsBeforeAnyWork) {
  const std::string dir = kiri::testing::temp_dir("unsupported");
  const std::string ds =
      write(dir, "ds.json",
            R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
          "ratio": 0.3}}, "fp16": {"enabled": true, "hysteresis": 2}})");
  Result r = run_kiri("train --deepspeed " + ds + " --set run.dir=" + dir + "/run");
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r, "DeepSpeed config '" + ds + "': 2 key(s) kiri cannot run as given"))
      << r.output;
  EXPECT_TRUE(has(r, "zero_optimization.offload_optimizer.ratio = 0.3")) << r.output;
  EXPECT_TRUE(has(r, "fp16.hysteresis = 2")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/run")) << "refused before the run folder";
  r = run_kiri("config --deepspeed " + write(dir, "z.json", R"({"zero_optimization":
               {"stage": 2}})") +
               " --set parallel.zero_stage=1");
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r,
                  "zero_optimization.stage gives parallel.zero_stage = 2, but kiri's config "
                  "or --set gives parallel.zero_stage = 1"))
      << r.output;
  r = run_kiri("config --deepspeed " + dir + "/missing.json");
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r, "DeepSpeed config")) << r.output;
  r = run_kiri("config --deepspeed " + write(dir, "bad.json", "{\"fp16\": {\"enabled\": tru"));
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r, "is not valid JSON")) << r.output;
}

// A rule between keys that the file set is named by the file's JSON paths (with kiri's keys).
TEST(DeepSpeedCli, ValidationErrorsNameTheJsonPaths) {
  const std::string dir = kiri::testing::temp_dir("paths");
  const std::string ds = write(dir, "ds.json", R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  const Result r = run_kiri("config --deepspeed " + ds);
  EXPECT_EQ(r.code, 2) << r.output;  // a config error
  EXPECT_TRUE(has(r, "DeepSpeed config '" + ds + "': ")) << r.output;
  EXPECT_TRUE(has(r,
                  "zero_optimization.offload_param.device (offload.parameters) = nvme needs "
                  "ZeRO stage 3"))
      << r.output;
  EXPECT_TRUE(has(r, "zero_optimization.stage (parallel.zero_stage)")) << r.output;
}

std::string tiny_run(const std::string& run_dir) {
  return " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_head=2"
         " --set model.n_embd=16 --set model.block_size=16 --set train.seq_len=16"
         " --set train.eval_every=0 --set train.eval_batches=1 --set run.dir=" +
         run_dir;
}

// Every stock config of tests/cli/deepspeed (README.md there names their sources) runs as it
// is: 2 steps of a tiny model, with the file's ZeRO stage, dtype and offload tier.
TEST(DeepSpeedCli, StockConfigsResolveAndTrainTwoSteps) {
  const std::string dir = kiri::testing::temp_dir("stock");
  int configs = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(KIRI_SOURCE_DIR) + "/tests/cli/deepspeed")) {
    if (entry.path().extension() != ".json") continue;
    const std::string name = entry.path().stem().string();
    json ds = json::parse(std::ifstream(entry.path()));
    json& zero = ds["zero_optimization"];
    std::string want_offload = "none", extra;
    if (zero.is_object() && zero.contains("offload_param") &&
        zero["offload_param"]["device"] == "nvme") {
      zero["offload_optimizer"]["nvme_path"] = zero["offload_param"]["nvme_path"] =
          dir + "/" + name + "_nvme";
      want_offload = "nvme";
      extra = " --set offload.buffer_mb=1";  // 4 states x 256 KiB blocks: a tiny model
    }
    const int want_stage = zero.is_boolean() ? int(zero.get<bool>()) : zero.value("stage", 0);
    const std::string want_dtype = ds.contains("bf16") && ds["bf16"]["enabled"] == true   ? "bf16"
                                   : ds.contains("fp16") && ds["fp16"]["enabled"] == true ? "fp16"
                                                                                          : "fp32";
    const std::string file = write(dir, name + ".json", ds.dump(2));
    const Result r = run_kiri("train --deepspeed " + file + " --max-steps 2" + extra +
                              tiny_run(dir + "/" + name));
    ASSERT_EQ(r.code, 0) << name << "\n" << r.output;
    const json config = json::parse(std::ifstream(dir + "/" + name + "/config.json"));
    EXPECT_EQ(config["parallel"]["zero_stage"], want_stage) << name;
    EXPECT_EQ(config["train"]["dtype"], want_dtype) << name;
    EXPECT_EQ(config["offload"]["optimizer"], want_offload) << name;
    EXPECT_EQ(config["offload"]["parameters"], want_offload) << name;
    EXPECT_EQ(config["log"]["every"], 1) << name;  // steps_per_print is not kiri's
    std::ifstream metrics(dir + "/" + name + "/metrics.jsonl");
    int steps = 0;
    for (std::string line; std::getline(metrics, line);) steps += json::parse(line)["step"] > 0;
    EXPECT_EQ(steps, 2) << name << "\n" << r.output;
    ++configs;
  }
  EXPECT_EQ(configs, 12);
}

TEST(DeepSpeedCli, TrainRunsTheDeepSpeedFilesBatchStageAndSchedule) {
  const std::string dir = kiri::testing::temp_dir("train");
  const std::string ds = write(dir, "ds.json", kRunConfig);
  const Result r =
      run_kiri("train --deepspeed " + ds +
               " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_head=2"
               " --set model.n_embd=16 --set model.block_size=16 --set train.seq_len=16"
               " --set train.steps=5 --set train.eval_every=0 --set train.eval_batches=1"
               " --set run.dir=" +
               dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  const json config = json::parse(std::ifstream(dir + "/run/config.json"));
  EXPECT_EQ(config["parallel"]["zero_stage"], 1);
  EXPECT_EQ(config["train"]["micro_batch"], 2);
  auto lrs = [&] {
    std::ifstream in(dir + "/run/metrics.jsonl");
    std::vector<double> out;
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line)["lr"]);
    return out;
  };
  // WarmupDecayLR(0 -> 1e-3 over 2 steps, linear; 0 at step 4), iteration = step - 1.
  std::vector<double> want = {0, 0, 5e-4, 1e-3, 5e-4};
  std::vector<double> got = lrs();
  ASSERT_EQ(got.size(), want.size()) << r.output;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "step " << i + 1;
  // Resumed with the same file, the schedule goes on: step 6 is iteration 5, past the end.
  const Result resumed = run_kiri("train --deepspeed " + ds + " --resume auto --set train.steps=6" +
                                  " --set run.dir=" + dir + "/run");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  want.push_back(0);
  got = lrs();
  ASSERT_EQ(got.size(), want.size()) << resumed.output;
  EXPECT_NEAR(got.back(), 0, 1e-12);
}

TEST(DeepSpeedCli, TheBatchIsCheckedAgainstTheJobsWorld) {
  const std::string dir = kiri::testing::temp_dir("world");
  const std::string ds = write(dir, "ds.json",
                               R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                                   "gradient_accumulation_steps": 2,
                                   "zero_optimization": {"stage": 2}})");
  const std::string args = " --deepspeed " + ds + " --set run.dir=" + dir + "/run --dry-run";
  Result r = run_kiri("launch -n 2 -- train" + args);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "\"zero_stage\": 2")) << r.output;
  r = run_kiri("train" + args);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(has(r,
                  "train_batch_size = 8 but train_micro_batch_size_per_gpu 2 x "
                  "gradient_accumulation_steps 2 x dp 1 = 4 (dp = world 1 / (tp 1 x pp 1))"))
      << r.output;
  r = run_kiri("launch -n 2 -- train" + args + " --auto");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_TRUE(
      has(r, "--auto chooses the layout, and --deepspeed " + ds + " sets parallel.zero_stage = 2"))
      << r.output;
}

}  // namespace
