// --deepspeed's mapping (cli/deepspeed_config.h) on the Hugging Face guide's ZeRO-2 and
// ZeRO-3 configs and DeepSpeed's getting-started one: every resolved key is asserted, each
// unsupported key is named with its JSON path, train_batch_size is checked and inferred,
// and a DeepSpeed key that contradicts an explicit kiri key is named with both values.
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
using kiri::RunConfig;
using nlohmann::json;
using Given = std::vector<std::pair<std::string, json>>;

json example(const std::string& name) {
  std::ifstream in(std::string(KIRI_SOURCE_DIR) + "/tests/cli/deepspeed/" + name);
  EXPECT_TRUE(in.good()) << name;
  return json::parse(in);
}

// The config an HF TrainingArguments would give (the values "auto" resolves to).
RunConfig kiri_config(const Given& given) {
  RunConfig cfg = kiri::default_run_config();
  for (const auto& [key, value] : given) kiri::apply_key(cfg, key, value);
  return cfg;
}

// The error message apply_deepspeed raises ("" when it raises none).
std::string error_of(const json& ds, const Given& given = {}, int world = 1) {
  try {
    apply_deepspeed(ds, "ds.json", kiri_config(given), given, world);
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

// The error message kiri::validate raises on a mapped config ("" when it raises none).
std::string validation_error(const RunConfig& c) {
  try {
    kiri::validate(c);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
    return e.message();
  }
  return "";
}

// "cpu" offload is where kiri's states are: none, with the note that says so.
TEST(DeepSpeedConfig, HfZero2ExampleReadsItsCpuOffloadAsHostMemory) {
  const DeepSpeedConfig d =
      apply_deepspeed(example("hf_zero2.json"), "ds.json", kiri::default_run_config(), {}, 1);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_EQ(d.config.offload.parameters, kiri::OffloadTier::kNone);
  EXPECT_TRUE(noted(d, "zero_optimization.offload_optimizer.pin_memory"));
  bool said = false;
  for (const std::string& n : d.notes)
    said |= n ==
            "zero_optimization.offload_optimizer.device: no effect in kiri (\"cpu\": on the "
            "CPU backend the optimizer states already live in host RAM)";
  EXPECT_TRUE(said);
  EXPECT_EQ(validation_error(d.config), "");
}

TEST(DeepSpeedConfig, HfZero2ExampleWithoutOffloadResolvesEveryKey) {
  json ds = example("hf_zero2.json");
  ds["zero_optimization"]["offload_optimizer"]["device"] = "none";
  const Given given = {{"train.lr", 3e-4}, {"train.warmup", 50}, {"train.micro_batch", 4}};
  const DeepSpeedConfig d = apply_deepspeed(ds, "ds.json", kiri_config(given), given, 2);
  const RunConfig& c = d.config;
  EXPECT_EQ(c.parallel.zero_stage, 2);
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 2e8 * 4 / (1 << 20));  // fp32 gradients: 762.9 MiB
  EXPECT_EQ(c.train.dtype, kiri::Precision::kFp32);             // fp16 "auto": kiri's
  EXPECT_EQ(c.train.loss_scale, 0);
  EXPECT_EQ(c.train.loss_scale_window, 1000);
  EXPECT_EQ(c.train.initial_scale_power, 16);
  EXPECT_EQ(c.train.min_loss_scale, 1);
  // AdamW's "auto"s and the scheduler's: kiri's values (given or default).
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.train.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.train.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.train.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.train.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.train.lr_schedule, kiri::LrSchedule::kDsWarmup);
  EXPECT_EQ(c.train.warmup, 50);
  EXPECT_EQ(c.train.warmup_type, kiri::WarmupType::kLog);  // DeepSpeed's default
  EXPECT_DOUBLE_EQ(c.train.warmup_lr, 0);
  EXPECT_DOUBLE_EQ(c.train.optimizer.grad_clip, 1.0);
  EXPECT_EQ(c.train.micro_batch, 4);
  EXPECT_EQ(c.train.grad_accum, 1);
  EXPECT_EQ(c.log.every, 1);  // kiri's: steps_per_print is DeepSpeed's console interval
  EXPECT_EQ(c.offload.optimizer, kiri::OffloadTier::kNone);
  for (const char* path :
       {"zero_optimization.offload_optimizer.pin_memory", "zero_optimization.allgather_partitions",
        "zero_optimization.allgather_bucket_size", "zero_optimization.overlap_comm",
        "zero_optimization.reduce_scatter", "zero_optimization.contiguous_gradients",
        "fp16.hysteresis", "wall_clock_breakdown", "steps_per_print"})
    EXPECT_TRUE(noted(d, path)) << path;
  kiri::validate(c);
}

TEST(DeepSpeedConfig, HfZero3ExampleReadsBothCpuOffloadsAsHostMemory) {
  const DeepSpeedConfig d =
      apply_deepspeed(example("hf_zero3.json"), "ds.json", kiri::default_run_config(), {}, 1);
  EXPECT_EQ(d.config.offload.optimizer, kiri::OffloadTier::kNone);
  EXPECT_EQ(d.config.offload.parameters, kiri::OffloadTier::kNone);
  EXPECT_TRUE(noted(d, "zero_optimization.offload_optimizer.device"));
  EXPECT_TRUE(noted(d, "zero_optimization.offload_param.device"));
  EXPECT_EQ(validation_error(d.config), "");
}
TEST(DeepSpeedConfig, HfZero3ExampleWithoutOffloadResolvesEveryKey) {
  json ds = example("hf_zero3.json");
  ds["zero_optimization"]["offload_optimizer"]["device"] = "none";
  ds["zero_optimization"]["offload_param"]["device"] = "none";
  const Given given = {{"train.dtype", "bf16"}, {"train.grad_accum", 4}};
  const DeepSpeedConfig d = apply_deepspeed(ds, "ds.json", kiri_config(given), given, 4);
  const RunConfig& c = d.config;
  EXPECT_EQ(c.parallel.zero_stage, 3);
  EXPECT_TRUE(c.parallel.prefetch);            // stage3_prefetch_bucket_size "auto"
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 25);  // reduce_bucket_size "auto"
  EXPECT_EQ(c.train.dtype, kiri::Precision::kBf16);
  EXPECT_EQ(c.train.grad_accum, 4);
  EXPECT_EQ(c.train.micro_batch, 8);
  EXPECT_EQ(c.train.lr_schedule, kiri::LrSchedule::kDsWarmup);
  EXPECT_EQ(c.log.every, 1);  // kiri's: steps_per_print is DeepSpeed's console interval
  for (const char* path :
       {"zero_optimization.offload_param.pin_memory", "zero_optimization.sub_group_size",
        "zero_optimization.stage3_max_live_parameters",
        "zero_optimization.stage3_max_reuse_distance",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save",
        "fp16.hysteresis"})  // bf16: no loss scaling
    EXPECT_TRUE(noted(d, path)) << path;
  // The entries a resumed run applies again: the stage, not the "auto"s.
  bool stage = false, bucket = false;
  for (const auto& [key, value] : d.entries) {
    stage |= key == "parallel.zero_stage" && value == 3;
    bucket |= key == "parallel.bucket_mb";
  }
  EXPECT_TRUE(stage);
  EXPECT_FALSE(bucket);
}

TEST(DeepSpeedConfig, GettingStartedExampleInfersTheMicroBatch) {
  const DeepSpeedConfig d = apply_deepspeed(example("deepspeed_getting_started.json"), "ds.json",
                                            kiri::default_run_config(), {}, 2);
  const RunConfig& c = d.config;
  EXPECT_EQ(c.train.micro_batch, 4);  // 8 / (accumulation 1 x dp 2)
  EXPECT_EQ(c.train.grad_accum, 1);
  EXPECT_EQ(c.parallel.zero_stage, 1);  // the old boolean form
  EXPECT_EQ(c.train.dtype, kiri::Precision::kFp16);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 1.5e-4);
}

TEST(DeepSpeedConfig, HysteresisAboveOneIsNamedUnderFp16) {
  json ds = example("hf_zero2.json");
  ds["zero_optimization"].erase("offload_optimizer");
  const std::string e = error_of(ds, {{"train.dtype", "fp16"}});
  EXPECT_TRUE(has(e, "1 key(s)")) << e;
  EXPECT_TRUE(has(e,
                  "fp16.hysteresis = 2: not supported: kiri's loss scaler backs off at the "
                  "first overflow (hysteresis 1)"))
      << e;
  ds["fp16"]["hysteresis"] = 1;
  EXPECT_EQ(error_of(ds, {{"train.dtype", "fp16"}}), "");
}

TEST(DeepSpeedConfig, EveryUnsupportedKeyIsNamedInOneMessage) {
  const json ds = json::parse(R"({
    "optimizer": {"type": "Lamb", "params": {"lr": 1e-3, "max_coeff": 0.3}},
    "scheduler": {"type": "OneCycle", "params": {}},
    "zero_optimization": {"stage": 2, "zero_quantized_weights": true, "offload_param":
                          {"device": "nvme", "nvme_path": "/local_nvme", "buffer_sizes": 5}},
    "flops_profiler": {"enabled": true},
    "tensorboard": {"enabled": false},
    "gradient_clippin": 1.0,
    "activation_checkpointing": {"cpu_checkpointing": true, "partition_activations": true},
    "communication_data_type": "fp16",
    "gradient_predivide_factor": 2.0
  })");
  const std::string e = error_of(ds);
  EXPECT_TRUE(has(e, "11 key(s) kiri cannot run as given")) << e;
  for (const char* path :
       {"optimizer.type = \"Lamb\"", "optimizer.params.max_coeff = 0.3",
        "scheduler.type = \"OneCycle\"", "zero_optimization.zero_quantized_weights = true",
        "zero_optimization.offload_param.buffer_sizes = 5: not supported: not an "
        "offload_param key kiri maps",
        "flops_profiler = {", "gradient_clippin = 1.0",
        "activation_checkpointing.cpu_checkpointing = true",
        "activation_checkpointing.partition_activations = true",
        "communication_data_type = \"fp16\": not supported: kiri reduces gradients in "
        "train.dtype, fp32"})
    EXPECT_TRUE(has(e, path)) << path << "\n" << e;
  EXPECT_FALSE(has(e, "tensorboard")) << e;  // disabled: no effect
  EXPECT_TRUE(has(e, "gradient_predivide_factor = 2.0")) << e;
}

TEST(DeepSpeedConfig, TrainBatchSizeMismatchNamesEveryNumber) {
  const json ds = json::parse(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                                  "gradient_accumulation_steps": 2})");
  const std::string e = error_of(ds, {}, 2);
  EXPECT_TRUE(has(e,
                  "train_batch_size = 64 but train_micro_batch_size_per_gpu 4 x "
                  "gradient_accumulation_steps 2 x dp 2 = 16 (dp = world 2 / (tp 1 x pp 1))"))
      << e;
  // On 8 ranks the three agree.
  EXPECT_EQ(error_of(ds, {}, 8), "");
  // A given dp (and the pipeline's micro-batches) count too.
  const std::string p =
      error_of(ds, {{"parallel.dp", 2}, {"parallel.pp", 2}, {"parallel.microbatches", 2}}, 4);
  EXPECT_TRUE(has(p, "x dp 2 x parallel.microbatches 2 = 32 (parallel.dp 2)")) << p;
}

TEST(DeepSpeedConfig, TrainBatchSizeInfersTheMissingOne) {
  auto resolved = [](const char* text, int world, const Given& given = {}) {
    return apply_deepspeed(json::parse(text), "ds.json", kiri_config(given), given, world)
        .config.train;
  };
  auto t = resolved(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2);
  EXPECT_EQ(t.micro_batch, 4);
  EXPECT_EQ(t.grad_accum, 4);
  t = resolved(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 2);
  EXPECT_EQ(t.micro_batch, 8);
  EXPECT_EQ(t.grad_accum, 2);
  t = resolved(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto"})", 2,
               {{"train.micro_batch", 2}});
  EXPECT_EQ(t.micro_batch, 2);
  EXPECT_EQ(t.grad_accum, 8);
  const std::string e = error_of(
      json::parse(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})"), {}, 2);
  EXPECT_TRUE(has(e,
                  "train_batch_size = 30 is not a multiple of train_micro_batch_size_per_gpu "
                  "4 x dp 2 = 8"))
      << e;
}

TEST(DeepSpeedConfig, AContradictionWithAnExplicitKiriKeyNamesBoth) {
  const json ds = json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 3e-4}},
                                  "zero_optimization": {"stage": 3}})");
  const std::string e = error_of(ds, {{"train.lr", 1e-3}, {"parallel.zero_stage", 1}});
  EXPECT_TRUE(has(e, "2 key(s)")) << e;
  EXPECT_TRUE(has(e,
                  "optimizer.params.lr gives train.lr = 0.0003, but kiri's config "
                  "or --set gives train.lr = 0.001"))
      << e;
  EXPECT_TRUE(has(e,
                  "zero_optimization.stage gives parallel.zero_stage = 3, but kiri's "
                  "config or --set gives parallel.zero_stage = 1"))
      << e;
  // Agreeing values, and "auto", are fine; a key kiri was not given takes the file's.
  EXPECT_EQ(error_of(ds, {{"train.lr", 3e-4}, {"parallel.zero_stage", 3}}), "");
  const json a = json::parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})");
  const Given lr = {{"train.lr", 1e-3}};
  EXPECT_DOUBLE_EQ(apply_deepspeed(a, "ds.json", kiri_config(lr), lr, 1).config.train.optimizer.lr,
                   1e-3);
}

TEST(DeepSpeedConfig, PrecisionFollowsDeepSpeedsRules) {
  auto dtype = [](const char* text, const Given& given = {}) {
    return apply_deepspeed(json::parse(text), "ds.json", kiri_config(given), given, 1)
        .config.train.dtype;
  };
  using kiri::Precision;
  EXPECT_EQ(dtype(R"({"bf16": {"enabled": true}})"), kiri::Precision::kBf16);
  EXPECT_EQ(dtype(R"({"bfloat16": {"enabled": true}})"), kiri::Precision::kBf16);
  EXPECT_EQ(dtype(R"({"fp16": {"enabled": true}})"), kiri::Precision::kFp16);
  EXPECT_EQ(dtype(R"({"bf16": {"enabled": "auto"}})", {{"train.dtype", "fp16"}}),
            kiri::Precision::kFp16);
  EXPECT_EQ(dtype(R"({"bf16": {"enabled": false}})", {}), kiri::Precision::kFp32);
  const std::string both = error_of(json::parse(R"({"bf16": {"enabled": true},
                                                    "fp16": {"enabled": true}})"));
  EXPECT_TRUE(has(both, "bf16.enabled and fp16.enabled are both true")) << both;
  const std::string against =
      error_of(json::parse(R"({"bf16": {"enabled": true}})"), {{"train.dtype", "fp16"}});
  EXPECT_TRUE(has(against,
                  "bf16.enabled gives train.dtype = \"bf16\", but kiri's "
                  "config or --set gives train.dtype = \"fp16\""))
      << against;
}

TEST(DeepSpeedConfig, SchedulersMapTheirParametersWithDeepSpeedsDefaults) {
  auto train_of = [](const char* text, const Given& given = {}) {
    return apply_deepspeed(json::parse(text), "ds.json", kiri_config(given), given, 1).config.train;
  };
  auto t = train_of(R"({"scheduler": {"type": "WarmupDecayLR", "params": {
      "warmup_min_lr": 1e-5, "warmup_max_lr": 2e-4, "warmup_num_steps": 30,
      "total_num_steps": 500, "warmup_type": "linear"}}})");
  EXPECT_EQ(t.lr_schedule, kiri::LrSchedule::kDsWarmupDecay);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 2e-4);
  EXPECT_DOUBLE_EQ(t.warmup_lr, 1e-5);
  EXPECT_DOUBLE_EQ(t.min_lr, 1e-5);  // decays back to warmup_min_lr
  EXPECT_EQ(t.warmup, 30);
  EXPECT_EQ(t.decay_steps, 500);
  EXPECT_EQ(t.warmup_type, kiri::WarmupType::kLinear);
  // Left out: DeepSpeed's defaults (WarmupDecayLR's peak 0.001, 1000 steps, log).
  t = train_of(R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 9}}})");
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 1e-3);
  EXPECT_EQ(t.warmup, 1000);
  EXPECT_EQ(t.warmup_type, kiri::WarmupType::kLog);
  EXPECT_DOUBLE_EQ(t.min_lr, 0);
  t = train_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": 4e-4}},
                   "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 100,
                   "warmup_min_ratio": 0.1, "warmup_num_steps": 10}}})");
  EXPECT_EQ(t.lr_schedule, kiri::LrSchedule::kDsWarmupCosine);
  EXPECT_DOUBLE_EQ(t.warmup_lr, 0.1 * 4e-4);
  EXPECT_DOUBLE_EQ(t.min_lr, 1e-4 * 4e-4);  // cos_min_ratio's default
  EXPECT_EQ(t.decay_steps, 100);
  const std::string e = error_of(json::parse(R"({"scheduler": {"type": "WarmupLR", "params":
      {"warmup_num_steps": 0, "total_num_steps": 5}}})"));
  EXPECT_TRUE(has(e,
                  "scheduler.params.total_num_steps = 5: not supported: not a parameter of "
                  "DeepSpeed's WarmupLR"))
      << e;
  EXPECT_TRUE(has(e, "warmup_num_steps must be a positive integer")) << e;
}

TEST(DeepSpeedConfig, ActivationCheckpointingSectionTurnsRecomputationOn) {
  const json ds = json::parse(R"({"activation_checkpointing": {"partition_activations": false,
      "contiguous_memory_optimization": false, "number_checkpoints": 4, "profile": false}})");
  const DeepSpeedConfig d = apply_deepspeed(ds, "ds.json", kiri::default_run_config(), {}, 1);
  EXPECT_EQ(d.config.parallel.activation_checkpointing, kiri::ActivationCheckpointing::kFull);
  EXPECT_TRUE(noted(d, "activation_checkpointing.number_checkpoints"));
  const std::string e = error_of(ds, {{"parallel.activation_checkpointing", "none"}});
  EXPECT_TRUE(has(e,
                  "activation_checkpointing gives parallel.activation_checkpointing = "
                  "\"full\", but kiri's config or --set gives "
                  "parallel.activation_checkpointing = \"none\""))
      << e;
}

TEST(DeepSpeedConfig, BucketsAndPrefetchMapToKirisUnits) {
  const json ds = json::parse(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 5e8,
      "stage3_prefetch_bucket_size": 0, "mics_shard_size": 2}})");
  const Given bf16 = {{"train.dtype", "bf16"}};
  const RunConfig c = apply_deepspeed(ds, "ds.json", kiri_config(bf16), bf16, 4).config;
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mb, 5e8 * 2 / (1 << 20));  // bf16 gradients
  EXPECT_FALSE(c.parallel.prefetch);
  EXPECT_STREQ(kiri::name(c.parallel.sharding_strategy), "HYBRID_SHARD");
  EXPECT_EQ(c.parallel.shard_group_size, 2);
}

}  // namespace

namespace {

// warmup_min_lr "auto" takes kiri's warm-up start and floor, each its own: no contradiction
// with a given train.min_lr (it was read as "gives train.min_lr = 0.0").
TEST(DeepSpeedConfig, AutoWarmupMinLrKeepsKirisValues) {
  const Given given = {{"train.min_lr", 1e-5}, {"train.warmup_lr", 2e-6}};
  for (const char* type : {"WarmupDecayLR", "WarmupLR"}) {
    const json ds = {
        {"scheduler",
         {{"type", type}, {"params", {{"warmup_min_lr", "auto"}, {"warmup_max_lr", "auto"}}}}}};
    EXPECT_EQ(error_of(ds, given), "") << type;
    const auto t = apply_deepspeed(ds, "ds.json", kiri_config(given), given, 1).config.train;
    EXPECT_DOUBLE_EQ(t.min_lr, 1e-5) << type;
    EXPECT_DOUBLE_EQ(t.warmup_lr, 2e-6) << type;
  }
}

// A key holding control characters is printed escaped, as JSON writes it: a NUL no longer
// cuts the message where it is printed.
TEST(DeepSpeedConfig, AKeyWithANulIsNamedEscaped) {
  const json ds = json::parse(R"({"bad\u0000key\nnext": 1, "fp16": {"x\u0001": 2}})");
  const std::string e = error_of(ds);
  EXPECT_TRUE(has(e, "\n  - bad\\u0000key\\u000anext = 1: not supported: not a DeepSpeed key"))
      << e;
  EXPECT_TRUE(has(e, "\n  - fp16.x\\u0001 = 2: not supported")) << e;
  EXPECT_EQ(e.find('\0'), std::string::npos);
}

// A static fp16 loss scale that overflows every gradient is refused with its key and value,
// not accepted and then blamed on the learning rate.
TEST(DeepSpeedConfig, AnImpossibleStaticLossScaleIsNamed) {
  const std::string e = error_of(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 1e30}})"));
  EXPECT_TRUE(has(e,
                  "fp16.loss_scale = 1e+30: train.loss_scale = 1e+30 is an impossible static "
                  "loss scale: above 65504 x 2^24 = 1098974756864"))
      << e;
  EXPECT_EQ(error_of(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 65536}})")), "");
  EXPECT_EQ(error_of(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 1098974756864}})")),
            "");
  EXPECT_NE(error_of(json::parse(R"({"fp16": {"enabled": true, "loss_scale": 1098974756865}})")),
            "");
}

}  // namespace

namespace {
// DeepSpeed's monitors map onto kiri's loggers, whose files go into the run folder.
TEST(DeepSpeedConfig, MonitorsMapOntoTheLoggers) {
  const json ds = json::parse(R"({"train_micro_batch_size_per_gpu": 2,
      "tensorboard": {"enabled": true, "output_path": "logs/", "job_name": "run1"},
      "csv_monitor": {"enabled": true, "output_path": "csv/"}})");
  const DeepSpeedConfig d = apply_deepspeed(ds, "ds.json", kiri_config({}), {}, 1);
  EXPECT_TRUE(d.config.log.tensorboard);
  EXPECT_TRUE(d.config.log.csv);
  EXPECT_TRUE(noted(d, "tensorboard.output_path"));
  EXPECT_TRUE(noted(d, "csv_monitor.output_path"));
  EXPECT_TRUE(has(error_of(json::parse(R"({"tensorboard": {"enabled": true, "flush": 1}})")),
                  "tensorboard.flush = 1: not supported"))
      << error_of(json::parse(R"({"tensorboard": {"enabled": true, "flush": 1}})"));
  EXPECT_TRUE(
      has(error_of(json::parse(R"({"csv_monitor": {"enabled": "yes"}})")), "csv_monitor.enabled"));
}
}  // namespace
