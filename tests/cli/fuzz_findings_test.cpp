// What the fuzz targets (fuzz/, docs/fuzzing.md) found in the config and state.json readers,
// kept fixed: each input is refused with a named error, in the library and by the binary,
// well within a second.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "cli/run_kiri.h"
#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"

namespace {

using Clock = std::chrono::steady_clock;

// A number beyond double's range made nlohmann's parser throw out_of_range (406), not the
// parse_error the reader caught: `kiri config` ended in "unexpected error" (config fuzz target).
TEST(FuzzFindings, ConfigNumberBeyondDoubleIsAConfigError) {
  const std::string text = R"({"train": {"lr": 1e400}})";
  try {
    kiri::parse_config_text(text, "big.json");
    FAIL() << "parse_config_text accepted " << text;
  } catch (const kiri::Error& e) {
    EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
    EXPECT_NE(e.message().find("big.json"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("1e400"), std::string::npos) << e.message();
  }

  const std::string dir = kiri::testing::temp_dir("number");
  const std::string file = dir + "/big.json";
  std::ofstream(file) << text;
  const auto start = Clock::now();
  const kiri::testing::Result r = kiri::testing::run_kiri("config " + file);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("config error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1e400"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("unexpected error"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir);
}

// An integer key given a number beyond int64 (11844674407370955161528 parses as a double)
// was cast to int64 unchecked: undefined behaviour (UBSan in fuzz_state, through the config
// a checkpoint stores). Doubles, strings and unsigned values beyond int64 are named now.
TEST(FuzzFindings, IntegerKeyBeyondInt64IsAConfigError) {
  for (const std::string value :
       {"11844674407370955161528", "1e30", "-1e30", "18446744073709551615", "\"1e30\""}) {
    const std::string text = R"({"model": {"vocab_size": )" + value + "}}";
    try {
      kiri::parse_config_text(text, "big.json");
      ADD_FAILURE() << "parse_config_text accepted " << text;
    } catch (const kiri::Error& e) {
      EXPECT_EQ(e.kind(), kiri::ErrorKind::kConfig) << e.what();
      EXPECT_NE(e.message().find("model.vocab_size must be an integer"), std::string::npos)
          << e.message();
    }
  }
  // Within range, the schema's own bounds still apply.
  try {
    kiri::parse_config_text(R"({"model": {"n_layer": 9223372036854775807}})", "big.json");
    ADD_FAILURE() << "n_layer 2^63-1 accepted";
  } catch (const kiri::Error& e) {
    EXPECT_NE(e.message().find("must be in [1, 4096]"), std::string::npos) << e.message();
  }
  const auto start = Clock::now();
  const kiri::testing::Result r = kiri::testing::run_kiri("config --set model.n_layer=1e30");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.n_layer must be an integer, got \"1e30\""), std::string::npos)
      << r.output;
}

}  // namespace
