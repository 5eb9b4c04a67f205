// parse_config_text: a config file's text without the file (what load_config and the
// fuzz target call). Hostile text is a kConfig error naming the problem, quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiri/base/error.h"
#include "kiri/cli/config_schema.h"

namespace {

using kiri::cli::parse_config_text;

void expect_config_error(const std::string& text, const std::vector<std::string>& parts) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    parse_config_text(text, "cfg.json");
    ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  } catch (const kiri::Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("cfg.json"), std::string::npos) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_LT(m.size(), 1000u) << m.substr(0, 300);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(ConfigText, NestedFlatAndCommentedKeysApply) {
  const kiri::train::RunConfig c = parse_config_text(
      "// a comment\n{\"model\": {\"n_layer\": 3}, /* flat too */ \"train.lr\": 0.002}", "cfg");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.train.optimizer.lr, 0.002);
  EXPECT_EQ(c.model.n_embd, kiri::train::default_run_config().model.n_embd);  // the default
}

TEST(ConfigText, HostileTextIsAConfigError) {
  expect_config_error(std::string(100000, '[') + std::string(100000, ']'),
                      {"nests more than 64 levels deep"});
  expect_config_error(std::string(100000, '{'), {"nests more than 64 levels deep"});
  expect_config_error("{\"train\": {\"lr\": 1e-3, \"lr\": 2e-3}}",
                      {"key 'train.lr' appears twice"});
  expect_config_error("{\"train.lr\": 1e-3, \"train\": {\"lr\": 2e-3}}",
                      {"key 'train.lr' is given twice (once flat, once nested)"});
  expect_config_error("{\"train\": {\"steps\": 5}}" + std::string("\0{\"x\": 1}", 9),
                      {"holds a NUL byte at offset 23"});
  // nlohmann throws out_of_range, not parse_error, for this: it escaped with a 100 KB message.
  expect_config_error("{\"train\": {\"lr\": " + std::string(100000, '9') + "}}",
                      {"is not valid JSON", "number overflow", "characters)"});
  expect_config_error("[1, 2]", {"must be a JSON object, got array"});
  expect_config_error("{\"train\": {\"stpes\": 2}}", {"unknown key 'train.stpes'"});
  expect_config_error("{\"train\": {\"steps\": -1}}", {"train.steps must be in [0, "});
  expect_config_error("", {"is not valid JSON"});
}

TEST(ConfigText, HugeKeysAndValuesAreQuotedWithinBoundsQuickly) {
  // A 1 MB key took seconds in the typo suggestion's edit distance (10 MB: minutes).
  const std::string big(1 << 20, 'x');
  expect_config_error("{\"train\": {\"" + big + "\": 1}}",
                      {"unknown key 'train.xxx", "(1048582 characters)", "keys of 'train'"});
  expect_config_error("{\"" + big + "\": 1}", {"unknown key 'xxx", "(1048576 characters)"});
  expect_config_error("{\"train\": {\"lr\": \"" + big + "\"}}",
                      {"train.lr must be a number", "(1048578 characters)"});
  expect_config_error("{\"train\": {\"dtype\": \"" + big + "\"}}",
                      {"train.dtype must be", "(1048576 characters)"});
}

}  // namespace
