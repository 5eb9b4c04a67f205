// state.json parsed alone (parse_checkpoint_state): what kiri writes round-trips, and
// every value it could not have written is a named kCheckpoint error, quickly and with
// a bounded message.
#include "kiri/ckpt/checkpoint_state.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "kiri/base/error.h"

namespace kiri::ckpt {
namespace {

using nlohmann::json;

// The shape Trainer::save_checkpoint writes.
json valid_state() {
  return {{"format_version", 2},
          {"step", 40},
          {"optimizer_step", 38},
          {"optimizer_files",
           {"optimizer-00000-of-00002.safetensors", "optimizer-00001-of-00002.safetensors"}},
          {"layout", {{"dp", 2}, {"tp", 1}, {"pp", 1}, {"zero_stage", 1}}},
          {"data", {{"position", 160}, {"seed", 1337}}},
          {"rng", {{"seed", 1337}, {"kind", "counter"}}},
          {"config", {{"train", {{"lr", 0.001}}}}},
          {"loss_scaler", {{"scale", 1024.0}, {"clean_steps", 3}, {"skipped_steps", 2}}}};
}

// Parses `text` and expects a kCheckpoint error with every part, within a second and a
// message of under 1000 characters.
void expect_refused(const std::string& text, const std::vector<std::string>& parts) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    parse_checkpoint_state(text, "ck/step_00000040/state.json");
    ADD_FAILURE() << "accepted: " << text.substr(0, 300);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("ck/step_00000040/state.json"), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_LT(m.size(), 1000u) << m.substr(0, 300);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// valid_state() with one change.
std::string with(const std::function<void(json&)>& change) {
  json s = valid_state();
  change(s);
  return s.dump();
}

// valid_state() with `key`'s value replaced by the raw JSON text `raw`.
std::string with_raw(const std::string& key, const std::string& raw) {
  std::string text = with([&](json& j) { j[key] = "@RAW@"; });
  return text.replace(text.find("\"@RAW@\""), 7, raw);
}

TEST(CheckpointState, ParsesWhatKiriWrites) {
  const CheckpointState s = parse_checkpoint_state(valid_state().dump(2), "state.json");
  EXPECT_EQ(s.format_version, 2);
  EXPECT_EQ(s.step, 40);
  EXPECT_EQ(s.optimizer_step, 38);
  EXPECT_EQ(s.data_position, 160u);
  ASSERT_EQ(s.optimizer_files.size(), 2u);
  EXPECT_EQ(s.optimizer_files[1], "optimizer-00001-of-00002.safetensors");
  ASSERT_TRUE(s.loss_scaler.has_value());
  EXPECT_EQ(s.loss_scaler->scale, 1024.0);
  EXPECT_EQ(s.loss_scaler->clean_steps, 3);
  EXPECT_EQ(s.loss_scaler->skipped_steps, 2);
  EXPECT_EQ(s.layout.at("dp"), 2);
  EXPECT_EQ(s.config.at("train").at("lr"), 0.001);
  // No scaler (fp32 and bf16 runs) and no config are fine.
  const CheckpointState t = parse_checkpoint_state(with([](json& j) {
                                                     j.erase("loss_scaler");
                                                     j.erase("config");
                                                   }),
                                                   "state.json");
  EXPECT_FALSE(t.loss_scaler.has_value());
  EXPECT_TRUE(t.config.is_null());
}

TEST(CheckpointState, RefusesStepsKiriCannotHaveWritten) {
  expect_refused(with([](json& j) { j["step"] = -5; }), {"step must be an integer", "got -5"});
  expect_refused(with([](json& j) { j["step"] = 10.5; }), {"step must be an integer", "10.5"});
  expect_refused(with([](json& j) { j["step"] = UINT64_MAX; }),
                 {"step must be an integer", "18446744073709551615"});
  expect_refused(with([](json& j) { j["step"] = "40"; }), {"step must be an integer", "\"40\""});
  expect_refused(with([](json& j) { j.erase("step"); }), {"has no 'step'"});
  expect_refused(with([](json& j) { j["optimizer_step"] = -1; }),
                 {"optimizer_step must be an integer", "-1"});
  expect_refused(with([](json& j) { j["optimizer_step"] = int64_t{1} << 62; }),
                 {"optimizer_step must be an integer in [0, 1099511627776]"});
  expect_refused(with([](json& j) { j["optimizer_step"] = nullptr; }), {"optimizer_step"});
  expect_refused(with([](json& j) { j["format_version"] = 3; }),
                 {"format_version 3", "this kiri reads 2"});
}

TEST(CheckpointState, RefusesBadDataPositionsFilesAndScalers) {
  expect_refused(with([](json& j) { j["data"]["position"] = -1; }),
                 {"data.position must be a non-negative integer", "-1"});
  expect_refused(with([](json& j) { j["data"]["position"] = 1.5; }), {"data.position", "1.5"});
  expect_refused(with([](json& j) { j["data"] = 7; }), {"data must be an object"});
  expect_refused(with([](json& j) { j["optimizer_files"] = json::array(); }),
                 {"optimizer_files must be a list of 1 to"});
  expect_refused(with([](json& j) { j["optimizer_files"][0] = "../../etc/passwd"; }),
                 {"optimizer_files holds \"../../etc/passwd\""});
  expect_refused(with([](json& j) { j["optimizer_files"][1] = 5; }), {"optimizer_files holds 5"});
  expect_refused(with([](json& j) { j["loss_scaler"]["scale"] = -1.0; }),
                 {"loss_scaler.scale must be a positive number"});
  expect_refused(with([](json& j) { j["loss_scaler"]["skipped_steps"] = -2; }),
                 {"loss_scaler.skipped_steps"});
  expect_refused(with([](json& j) { j["config"] = "fast"; }), {"config must be an object"});
  expect_refused("[1, 2]", {"must hold a JSON object, got array"});
}

TEST(CheckpointState, RefusesDeepNestingDuplicatesAndGarbageQuickly) {
  // 100,000 levels (~600 KB) crashed in nlohmann's recursive dump(); 65 are refused.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refused(deep, {"nests more than 64 levels deep"});
  expect_refused(with_raw("config", deep), {"nests more than 64 levels deep"});
  // 64 levels in all are allowed (the layout is kept as written), 65 are not.
  const std::string levels_63 = std::string(63, '[') + std::string(63, ']');
  EXPECT_EQ(parse_checkpoint_state(with_raw("layout", levels_63), "state.json").layout.dump(),
            levels_63);
  expect_refused(with_raw("layout", "[" + levels_63 + "]"), {"nests more than 64"});
  std::string dup = valid_state().dump();
  dup.insert(1, "\"step\": 1, ");
  expect_refused(dup, {"key 'step' appears twice"});
  expect_refused("{\"data\": {\"position\": 1, \"position\": 2}}", {"key 'data.position'"});
  expect_refused("{\"step\": " + std::string(200000, '9'), {"is not valid JSON"});
  expect_refused("", {"is not valid JSON"});
  // nlohmann would stop at the NUL and accept the text before it.
  expect_refused(valid_state().dump() + std::string("\0garbage", 8),
                 {"holds a NUL byte at offset"});
}

// Issue 25: the global batch a resume keeps and the fingerprints it checks the data against.
TEST(CheckpointState, ReadsTheGlobalBatchAndTheFingerprints) {
  const json prints = {{"tokenizer", {{"name", "byte"}, {"files", json::object()}}},
                       {"data", {{"dir", "d"}, {"train", {{"tokens", 9}, {"hash", "00"}}}}}};
  const CheckpointState s = parse_checkpoint_state(with([&](json& j) {
                                                     j["global_batch"] = 16;
                                                     j["fingerprints"] = prints;
                                                   }),
                                                   "state.json");
  EXPECT_EQ(s.global_batch, 16);
  EXPECT_EQ(s.fingerprints, prints);
  const CheckpointState old = parse_checkpoint_state(valid_state().dump(), "state.json");
  EXPECT_EQ(old.global_batch, 0);  // absent: nothing to keep
  EXPECT_TRUE(old.fingerprints.is_null());
  expect_refused(with([](json& j) { j["global_batch"] = 0; }),
                 {"global_batch must be an integer in [1, 1099511627776], got 0"});
  expect_refused(with([](json& j) { j["global_batch"] = "16"; }), {"global_batch", "\"16\""});
  expect_refused(with([](json& j) { j["fingerprints"] = 5; }),
                 {"fingerprints must be an object, got number"});
}

}  // namespace
}  // namespace kiri::ckpt
