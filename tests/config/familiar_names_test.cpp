// The names users bring from other trainers: Hugging Face TrainingArguments' names get kiri's
// key, train.epochs excludes train.steps, and a validation error of a config a DeepSpeed file
// gave keys to names the file's JSON paths.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/deepspeed_config.h"
#include "temp_dir.h"

namespace {

using kiri::Error;

std::string set_error(const std::string& kv) {
  kiri::RunConfig cfg = kiri::default_run_config();
  try {
    kiri::apply_set(cfg, kv);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig);
    return e.message();
  }
  return "";
}

TEST(FamiliarNames, HuggingFaceNamesGetKirisKey) {
  const std::pair<const char*, const char*> names[] = {
      {"learning_rate", "train.lr"},
      {"per_device_train_batch_size", "train.micro_batch"},
      {"gradient_accumulation_steps", "train.grad_accum"},
      {"num_train_epochs", "train.epochs"},
      {"warmup_steps", "train.warmup"},
      {"train.learning_rate", "train.lr"}};
  for (const auto& [name, key] : names) {
    const std::string e = set_error(std::string(name) + "=1");
    EXPECT_EQ(e, std::string("unknown key '") + name +
                     "': that is a Hugging Face TrainingArguments name; kiri's key is " + key +
                     " (docs/config.md)")
        << name;
  }
  // A config file's key too.
  const std::string dir = kiri::testing::temp_dir("hf");
  std::ofstream(dir + "/c.json") << R"({"per_device_train_batch_size": 4})";
  try {
    kiri::load_config(dir + "/c.json", {});
    ADD_FAILURE() << "per_device_train_batch_size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("kiri's key is train.micro_batch"), std::string::npos)
        << e.message();
  }
}

TEST(FamiliarNames, EpochsAndStepsAreOneOrTheOther) {
  EXPECT_DOUBLE_EQ(kiri::load_config("", {"train.epochs=2.5"}).train.epochs, 2.5);
  EXPECT_EQ(kiri::load_config("", {"train.epochs=0", "train.steps=7"}).train.steps, 7);
  try {
    kiri::load_config("", {"train.epochs=2", "train.steps=7"});
    ADD_FAILURE() << "both were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "train.steps and train.epochs = 2 are both given (--max-steps, --epochs): give "
              "one of them");
  }
  EXPECT_NE(set_error("train.epochs=-1"), "");
}

// Only whole keys are named: train.lr is not found inside train.lr_schedule or train.min_lr.
TEST(FamiliarNames, DeepSpeedValidationErrorsNameTheJsonPath) {
  kiri::RunConfig cfg = kiri::default_run_config();
  cfg.train.optimizer.lr = 1e-5;
  cfg.train.min_lr = 1e-4;
  try {
    kiri::validate_deepspeed(cfg, {{"train.lr", "scheduler.params.warmup_max_lr"}}, "ds.json");
    ADD_FAILURE() << "min_lr > lr was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "DeepSpeed config 'ds.json': train.min_lr = 0.0001 exceeds "
              "scheduler.params.warmup_max_lr (train.lr) = 1e-05");
  }
  // An error about keys the file did not set is kiri's own.
  try {
    kiri::validate_deepspeed(cfg, {{"train.lr_schedule", "scheduler.type"}}, "ds.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.message().rfind("train.min_lr = ", 0), 0u) << e.message();
  }
}

}  // namespace
