// parse_config_text: a config file's text without the file (what load_config and the
// fuzz target call). Hostile text is a kConfig error naming the problem, quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"

namespace {

using kiri::parse_config_text;

// Returns the seconds the refusal took: within issue 12's 10 s for every hostile text (the
// growth tests below catch a superlinear parse without a machine-bound wall clock).
double expect_config_error(const std::string& text, const std::vector<std::string>& parts) {
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
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0);
  return s;
}

TEST(ConfigText, NestedFlatAndCommentedKeysApply) {
  const kiri::RunConfig c = parse_config_text(
      "// a comment\n{\"model\": {\"n_layer\": 3}, /* flat too */ \"train.lr\": 0.002}", "cfg");
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.train.optimizer.lr, 0.002);
  EXPECT_EQ(c.model.n_embd, kiri::default_run_config().model.n_embd);  // the default
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
  // A 1 MB key took seconds in the typo suggestion's edit distance (10 MB: minutes): each
  // case at 256 KiB and at 1 MiB, where linear work takes 4x as long and quadratic 16x.
  double small = 0, large = 0;
  for (const size_t n : {size_t{1} << 18, size_t{1} << 20}) {
    const std::string big(n, 'x');
    const auto chars = [&](size_t extra) {
      return "(" + std::to_string(n + extra) + " characters)";
    };
    double t = expect_config_error("{\"train\": {\"" + big + "\": 1}}",
                                   {"unknown key 'train.xxx", chars(6), "keys of 'train'"});
    t += expect_config_error("{\"" + big + "\": 1}", {"unknown key 'xxx", chars(0)});
    t += expect_config_error("{\"train\": {\"lr\": \"" + big + "\"}}",
                             {"train.lr must be a number", chars(2)});
    t += expect_config_error("{\"train\": {\"dtype\": \"" + big + "\"}}",
                             {"train.dtype must be", chars(0)});
    (n == (size_t{1} << 18) ? small : large) = t;
  }
  EXPECT_LT(large, 8 * small + 0.2) << "256 KiB: " << small << " s, 1 MiB: " << large << " s";
}

}  // namespace
