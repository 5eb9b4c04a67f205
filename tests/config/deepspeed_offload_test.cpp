// --deepspeed's offload keys (zero_optimization.offload_optimizer, offload_param, the old
// cpu_offload keys, aio) onto kiri's offload.* keys: the Hugging Face guide's ZeRO-Infinity
// config (NVMe for both, its aio block) resolves to every kiri key, DeepSpeed's own
// top-level aio block too; the keys with no effect are noted with why, the ones kiri cannot
// run are named, and two DeepSpeed keys that map onto one kiri key must agree.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/deepspeed_config.h"
#include "test_paths.h"

namespace {

using kiri::apply_deepspeed;
using kiri::DeepSpeedConfig;
using kiri::Error;
using kiri::OffloadTier;
using kiri::RunConfig;
using nlohmann::json;
using Given = std::vector<std::pair<std::string, json>>;

json example(const std::string& name) {
  std::ifstream in(std::string(KIRI_SOURCE_DIR) + "/tests/cli/deepspeed/" + name);
  EXPECT_TRUE(in.good()) << name;
  return json::parse(in);
}

RunConfig kiri_config(const Given& given) {
  RunConfig cfg = kiri::default_run_config();
  for (const auto& [key, value] : given) kiri::apply_key(cfg, key, value);
  return cfg;
}

DeepSpeedConfig mapped(const json& ds, const Given& given = {}) {
  return apply_deepspeed(ds, "ds.json", kiri_config(given), given, 1);
}

std::string error_of(const json& ds, const Given& given = {}) {
  try {
    mapped(ds, given);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
    return e.message();
  }
  return "";
}

std::string validation_error(const RunConfig& c) {
  try {
    kiri::validate(c);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
    return e.message();
  }
  return "";
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

bool noted(const DeepSpeedConfig& d, const std::string& path) {
  for (const std::string& n : d.notes)
    if (n.rfind(path + ": no effect in kiri (", 0) == 0) return true;
  return false;
}

json entry(const DeepSpeedConfig& d, const std::string& key) {
  for (const auto& [k, v] : d.entries)
    if (k == key) return v;
  return nullptr;
}

TEST(DeepSpeedOffload, HfZeroInfinityExampleResolvesToKirisKeys) {
  const DeepSpeedConfig d = mapped(example("hf_zero3_nvme.json"), {{"train.dtype", "bf16"}});
  const RunConfig& c = d.config;
  EXPECT_EQ(c.parallel.zero_stage, 3);
  EXPECT_EQ(c.offload.optimizer, kiri::OffloadTier::kNvme);
  EXPECT_EQ(c.offload.parameters, kiri::OffloadTier::kNvme);
  EXPECT_EQ(c.offload.path, "/local_nvme");  // both sections' nvme_path: one folder
  EXPECT_EQ(c.offload.buffer_count, 4);      // offload_optimizer.buffer_count
  EXPECT_EQ(c.offload.block_size, "262144");
  EXPECT_EQ(c.offload.queue_depth, 32);
  EXPECT_DOUBLE_EQ(c.offload.buffer_mb, 64);  // not from offload_param.buffer_size
  for (const char* path :
       {"zero_optimization.offload_optimizer.pin_memory",
        "zero_optimization.offload_optimizer.fast_init",
        "zero_optimization.offload_param.pin_memory",
        "zero_optimization.offload_param.buffer_count",
        "zero_optimization.offload_param.buffer_size", "zero_optimization.offload_param.max_in_cpu",
        "zero_optimization.aio.thread_count", "zero_optimization.aio.single_submit",
        "zero_optimization.aio.overlap_events"})
    EXPECT_TRUE(noted(d, path)) << path;
  // What a resumed run applies again.
  EXPECT_EQ(entry(d, "offload.optimizer"), "nvme");
  EXPECT_EQ(entry(d, "offload.parameters"), "nvme");
  EXPECT_EQ(entry(d, "offload.path"), "/local_nvme");
  EXPECT_EQ(entry(d, "offload.block_size"), "262144");
  EXPECT_EQ(entry(d, "offload.queue_depth"), 32);
  // Stage 3 with both on NVMe, 64 MiB buffers over 3 x 256 KiB: a config that runs.
  EXPECT_EQ(validation_error(c), "");
}

// DeepSpeed's ZeRO tutorial's ZeRO-Infinity example ("Offloading to CPU and NVMe with
// ZeRO-Infinity"): CPU for both, where kiri's states are already (none, with a note each);
// with nvme it offloads.
TEST(DeepSpeedOffload, DeepSpeedTutorialsZeroInfinityExample) {
  json ds = json::parse(R"({"zero_optimization": {"stage": 3, "contiguous_gradients": true,
      "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
      "stage3_prefetch_bucket_size": 1e7, "stage3_param_persistence_threshold": 1e5,
      "reduce_bucket_size": 1e7, "sub_group_size": 1e9,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})");
  DeepSpeedConfig d = mapped(ds);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_EQ(d.config.offload.parameters, kiri::OffloadTier::kNone);
  EXPECT_TRUE(noted(d, "zero_optimization.offload_optimizer.device"));
  EXPECT_TRUE(noted(d, "zero_optimization.offload_param.device"));
  EXPECT_EQ(validation_error(d.config), "");
  ds["zero_optimization"]["offload_optimizer"]["device"] = "nvme";
  ds["zero_optimization"]["offload_param"]["device"] = "nvme";
  d = mapped(ds);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNvme);
  EXPECT_EQ(d.config.offload.parameters, kiri::OffloadTier::kNvme);
  EXPECT_EQ(d.config.offload.path, "{run.dir}/offload");  // no nvme_path: kiri's default
  EXPECT_DOUBLE_EQ(d.config.parallel.bucket_mb, 1e7 * 4 / (1 << 20));
  EXPECT_EQ(validation_error(d.config), "");
}

TEST(DeepSpeedOffload, DeepSpeedsTopLevelAioBlockMapsTheSame) {
  const json ds = json::parse(R"({"zero_optimization": {"stage": 1, "offload_optimizer":
      {"device": "nvme", "nvme_path": "/mnt/nvme0", "buffer_count": 6}},
      "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1,
              "single_submit": false, "overlap_events": true}})");
  const DeepSpeedConfig d = mapped(ds);
  const RunConfig& c = d.config;
  EXPECT_EQ(c.parallel.zero_stage, 1);  // kiri offloads the optimizer at any stage
  EXPECT_EQ(c.offload.optimizer, kiri::OffloadTier::kNvme);
  EXPECT_EQ(c.offload.parameters, kiri::OffloadTier::kNone);
  EXPECT_EQ(c.offload.path, "/mnt/nvme0");
  EXPECT_EQ(c.offload.buffer_count, 6);
  EXPECT_EQ(c.offload.block_size, "1048576");
  EXPECT_EQ(c.offload.queue_depth, 8);
  EXPECT_TRUE(noted(d, "aio.thread_count"));
  EXPECT_TRUE(noted(d, "aio.overlap_events"));
  EXPECT_EQ(validation_error(c), "");
  // Both places at once is ambiguous.
  json twice = ds;
  twice["zero_optimization"]["aio"] = {{"queue_depth", 8}};
  const std::string e = error_of(twice);
  EXPECT_TRUE(has(e, "aio is given both at the top level and in zero_optimization")) << e;
}

TEST(DeepSpeedOffload, NvmePathsThatDifferAreNamed) {
  const json ds = json::parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme_a"},
      "offload_param": {"device": "nvme", "nvme_path": "/nvme_b"}}})");
  const std::string e = error_of(ds);
  EXPECT_TRUE(has(e, "1 key(s)")) << e;
  EXPECT_TRUE(has(e,
                  "zero_optimization.offload_param.nvme_path = \"/nvme_b\" maps to "
                  "offload.path, as zero_optimization.offload_optimizer.nvme_path = "
                  "\"/nvme_a\" does: kiri has one offload.path for both"))
      << e;
}

TEST(DeepSpeedOffload, OldCpuOffloadKeysAreHostMemory) {
  const json ds = json::parse(R"({"zero_optimization": {"stage": 3,
      "cpu_offload": true, "cpu_offload_params": true, "cpu_offload_use_pin_memory": true}})");
  const DeepSpeedConfig d = mapped(ds);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_EQ(d.config.offload.parameters, kiri::OffloadTier::kNone);
  EXPECT_TRUE(noted(d, "zero_optimization.cpu_offload"));
  EXPECT_TRUE(noted(d, "zero_optimization.cpu_offload_params"));
  EXPECT_TRUE(noted(d, "zero_optimization.cpu_offload_use_pin_memory"));
  EXPECT_EQ(validation_error(d.config), "");
  // Against a given kiri tier it is a contradiction, named with the JSON path.
  const std::string e = error_of(ds, {{"offload.optimizer", "nvme"}});
  EXPECT_TRUE(has(e,
                  "zero_optimization.cpu_offload = true keeps the optimizer states in host "
                  "RAM, but kiri's config or --set gives offload.optimizer = nvme"))
      << e;
  // false offloads nothing; a non-boolean is named.
  const DeepSpeedConfig off =
      mapped(json::parse(R"({"zero_optimization": {"cpu_offload": false}})"));
  EXPECT_EQ(off.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_TRUE(noted(off, "zero_optimization.cpu_offload"));
  EXPECT_TRUE(has(error_of(json::parse(R"({"zero_optimization": {"cpu_offload": 1}})")),
                  "zero_optimization.cpu_offload must be true or false, got 1"));
  // The old key and the new section must agree.
  const std::string both = error_of(json::parse(R"({"zero_optimization": {"cpu_offload": true,
      "offload_optimizer": {"device": "nvme"}}})"));
  EXPECT_TRUE(has(both,
                  "zero_optimization.offload_optimizer.device = \"nvme\" maps to "
                  "offload.optimizer, as zero_optimization.cpu_offload = true does"))
      << both;
}

TEST(DeepSpeedOffload, KeysKiriCannotRunAreNamedInOneMessage) {
  const json ds = json::parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "ratio": 0.3, "buffer_count": 0},
      "offload_param": {"device": "disk", "max_in_cpu": "lots"}},
      "aio": {"block_size": 3000, "queue_depth": 8, "use_gds": true, "qd": 2,
              "single_submit": "no"}})");
  const std::string e = error_of(ds);
  EXPECT_TRUE(has(e, "8 key(s) kiri cannot run as given")) << e;
  for (const char* p :
       {"zero_optimization.offload_optimizer.ratio = 0.3: not supported: ZeRO-Offload++ splits "
        "the update",
        "zero_optimization.offload_optimizer.buffer_count = 0: ",
        "zero_optimization.offload_param.device must be \"none\", \"cpu\" or \"nvme\", got "
        "\"disk\"",
        "zero_optimization.offload_param.max_in_cpu must be a count of elements, got \"lots\"",
        "aio.block_size = \"3000\": offload.block_size must be a multiple of 4 KiB",
        "aio.use_gds = true: not supported: GPUDirect Storage",
        "aio.qd = 2: not supported: not an aio key kiri maps",
        "aio.single_submit must be true or false, got \"no\""})
    EXPECT_TRUE(has(e, p)) << p << "\n" << e;
}

TEST(DeepSpeedOffload, DeviceNoneMapsAndContradictsAnExplicitKiriKey) {
  const json ds = json::parse(R"({"zero_optimization": {"offload_optimizer":
      {"device": "none", "nvme_path": "/local_nvme", "buffer_count": 4}}})");
  const DeepSpeedConfig d = mapped(ds);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_EQ(d.config.offload.path, "{run.dir}/offload");  // not nvme: the path is unused
  EXPECT_EQ(d.config.offload.buffer_count, 4);            // kiri's default, untouched
  EXPECT_TRUE(noted(d, "zero_optimization.offload_optimizer.nvme_path"));
  EXPECT_TRUE(noted(d, "zero_optimization.offload_optimizer.buffer_count"));
  const std::string e = error_of(ds, {{"offload.optimizer", "nvme"}});
  EXPECT_TRUE(has(e,
                  "zero_optimization.offload_optimizer.device gives offload.optimizer = "
                  "\"none\", but kiri's config or --set gives offload.optimizer = \"nvme\""))
      << e;
  // "auto" keeps kiri's device, and its nvme makes nvme_path count.
  const DeepSpeedConfig a = mapped(json::parse(R"({"zero_optimization": {"offload_optimizer":
      {"device": "auto", "nvme_path": "/ssd"}}})"),
                                   {{"offload.optimizer", "nvme"}});
  EXPECT_EQ(a.config.offload.optimizer, kiri::OffloadTier::kNvme);
  EXPECT_EQ(a.config.offload.path, "/ssd");
}

TEST(DeepSpeedOffload, ParameterOffloadOutsideStage3IsRefusedByValidation) {
  // DeepSpeed's keys map as given; the rule between them is validate_offload's.
  const DeepSpeedConfig d = mapped(json::parse(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "nvme"}, "offload_param": {"device": "nvme"}}})"));
  const std::string e = validation_error(d.config);
  EXPECT_TRUE(has(e, "offload.parameters = nvme needs ZeRO stage 3")) << e;
  EXPECT_TRUE(has(e, "parallel.zero_stage = 2")) << e;
}

}  // namespace
