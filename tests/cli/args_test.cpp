// The option parser on a verb's table, and the error lines run_cli prints.
#include "kiri/cli/args.h"

#include <gtest/gtest.h>

#include "kiri/cli/report.h"
#include "kiri/cli/verbs.h"

namespace {

using kiri::Error;
using kiri::ErrorKind;
using kiri::cli::Args;
using kiri::cli::OptionKind;
using kiri::cli::VerbSpec;

const VerbSpec kSpec = {"demo",
                        "[FILE]",
                        0,
                        1,
                        "A verb for the tests.",
                        {{"--set", OptionKind::kRepeated, "KEY=VALUE", "", "set a key"},
                         {"--steps", OptionKind::kValue, "N", "10", "steps"},
                         {"--lr", OptionKind::kValue, "X", "", "rate"},
                         {"-n", OptionKind::kValue, "N", "", "ranks"},
                         {"--json", OptionKind::kFlag, "", "", "JSON"},
                         {"-h,--help", OptionKind::kFlag, "", "", "help"}}};

// The message of the kiri::Error that parsing argv raises ("" if none).
std::string parse_error(const std::vector<std::string>& argv, ErrorKind kind = ErrorKind::kConfig) {
  try {
    Args a(argv, kSpec);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.message();
  }
  return "";
}

TEST(Args, ReadsValuesFlagsPositionalsAndRepeats) {
  Args a(
      {"f.json", "--set", "a=1", "--steps=7", "--set", "b=2", "-n", "4", "--json", "--lr", "-0.5"},
      kSpec);
  EXPECT_EQ(a.positional(), std::vector<std::string>{"f.json"});
  EXPECT_EQ(a.all("set"), (std::vector<std::string>{"a=1", "b=2"}));
  EXPECT_EQ(a.get_int("steps", 10), 7);
  EXPECT_EQ(a.get_int("n", 1), 4);
  EXPECT_DOUBLE_EQ(a.get_double("lr", 1.0), -0.5);  // a negative number is a value
  EXPECT_TRUE(a.flag("json"));
  EXPECT_FALSE(a.flag("help"));
  Args none({}, kSpec);
  EXPECT_EQ(none.get_int("steps", 10), 10);
  EXPECT_EQ(none.get("lr"), std::nullopt);
  EXPECT_TRUE(none.all("set").empty());
  EXPECT_TRUE(none.positional().empty());
}

TEST(Args, BadCommandLinesAreNamed) {
  EXPECT_EQ(parse_error({"--stesp", "3"}),
            "unknown option --stesp; did you mean --steps? (kiri demo --help lists the options)");
  EXPECT_EQ(parse_error({"--stesp=3"}).substr(0, 38), "unknown option --stesp; did you mean -");
  EXPECT_NE(parse_error({"--frobnicate"}).find("(kiri demo takes: --set --steps --lr -n --json"),
            std::string::npos);
  EXPECT_EQ(parse_error({"--steps", "1", "--steps", "2"}), "--steps given 2 times (once at most)");
  EXPECT_EQ(parse_error({"--json=yes"}), "--json takes no value, got 'yes'");
  EXPECT_NE(parse_error({"--steps"}).find("--steps"), std::string::npos);
  EXPECT_EQ(parse_error({"a", "b"}),
            "kiri demo takes 0 to 1 argument(s), got 2 ('b') (usage: kiri demo [options] [FILE])");
  EXPECT_EQ(parse_error({"--steps", "x"}), "");  // read as an integer only when asked
  Args a({"--steps", "x", "-n", "2.5"}, kSpec);
  try {
    a.get_int("steps", 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "--steps must be an integer, got 'x'");
  }
  try {
    a.get_int("n", 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "-n must be an integer, got '2.5'");
  }
}

TEST(Args, ReadingAnUndeclaredOptionIsAnInternalError) {
  Args a({}, kSpec);
  try {
    a.get("overwrite");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(e.message().find("'overwrite'"), std::string::npos) << e.message();
  }
}

TEST(Args, HelpComesBeforeAnyOtherCheck) {
  EXPECT_THROW(Args({"--frobnicate", "-h"}, kSpec), kiri::cli::HelpRequested);
  EXPECT_THROW(Args({"a", "b", "c", "--help"}, kSpec), kiri::cli::HelpRequested);
  // After "--" it belongs to a launched command.
  EXPECT_NO_THROW(Args({"--", "--help"}, kSpec));
  try {
    Args({"--help"}, kSpec);
  } catch (const kiri::cli::HelpRequested& h) {
    const std::string text = h.what();
    EXPECT_EQ(text.rfind("usage: kiri demo [options] [FILE]\n\nA verb for the tests.\n", 0), 0u)
        << text;
    EXPECT_NE(text.find("--steps N"), std::string::npos) << text;
    EXPECT_NE(text.find("steps (default: 10)"), std::string::npos) << text;
    EXPECT_NE(text.find("set a key (repeatable)"), std::string::npos) << text;
  }
}

TEST(Args, EveryVerbsTableIsConsistent) {
  for (const VerbSpec& v : kiri::cli::verb_specs()) {
    std::set<std::string> keys;
    for (const auto& o : v.options) {
      EXPECT_TRUE(keys.insert(kiri::cli::option_key(o)).second) << v.name << " " << o.names;
      EXPECT_FALSE(o.help.empty()) << v.name << " " << o.names;
      EXPECT_EQ(o.kind == OptionKind::kFlag, o.value_name.empty()) << v.name << " " << o.names;
    }
    EXPECT_LE(v.min_positionals, v.max_positionals) << v.name;
    EXPECT_TRUE(keys.count("help") && keys.count("verbose")) << v.name;
  }
}

TEST(Report, ErrorLinesNameTheRankOnlyForOneRanksErrors) {
  using kiri::cli::error_text;
  const Error config(ErrorKind::kConfig, "unknown key 'x'", "/src/kiri/cli/schema.cpp", 12);
  const Error data(ErrorKind::kData, "short.txt is too short", "/src/kiri/data/corpus.cpp", 7);
  EXPECT_TRUE(kiri::cli::same_on_every_rank(ErrorKind::kConfig));
  for (ErrorKind k :
       {ErrorKind::kData, ErrorKind::kCheckpoint, ErrorKind::kOutOfMemory, ErrorKind::kCommTimeout,
        ErrorKind::kCommMismatch, ErrorKind::kCommAborted, ErrorKind::kIo, ErrorKind::kInternal})
    EXPECT_FALSE(kiri::cli::same_on_every_rank(k));
  EXPECT_EQ(error_text(config, -1, false), "kiri: config error: unknown key 'x'");
  EXPECT_EQ(error_text(config, -1, true), "kiri: config error: unknown key 'x' [schema.cpp:12]");
  EXPECT_EQ(error_text(data, 1, false), "kiri: rank 1: data error: short.txt is too short");
  EXPECT_EQ(error_text(data, 0, true),
            "kiri: rank 0: data error: short.txt is too short [corpus.cpp:7]");
  EXPECT_EQ(error_text(data, -1, false), "kiri: data error: short.txt is too short");
}

}  // namespace
