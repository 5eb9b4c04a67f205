// The kiri binary's command line: help for every verb (checked against the verbs' own
// tables), --version, suggestions for typos, error lines without source locations unless
// --verbose, each error printed once under kiri launch, and the parse-only modes.
#include <gtest/gtest.h>

#include <regex>

#include "cli/run_kiri.h"
#include "kiri/cli/verbs.h"
#include "test_paths.h"

namespace {

using kiri::cli::OptionSpec;
using kiri::cli::VerbSpec;
using kiri::testing::Result;
using kiri::testing::run_kiri;

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The names of "-h,--help": {"-h", "--help"}.
std::vector<std::string> names_of(const OptionSpec& o) {
  std::vector<std::string> out;
  std::stringstream ss(o.names);
  for (std::string n; std::getline(ss, n, ',');) out.push_back(n);
  return out;
}

TEST(CliHelp, EveryVerbsHelpNamesEveryOptionOfItsTable) {
  ASSERT_GE(kiri::cli::verb_specs().size(), 9u);
  for (const VerbSpec& v : kiri::cli::verb_specs()) {
    const Result r = run_kiri(v.name + " --help");
    ASSERT_EQ(r.code, 0) << v.name << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("usage: kiri " + v.name, 0), 0u) << r.output;
    EXPECT_NE(r.output.find(v.summary), std::string::npos) << r.output;
    for (const OptionSpec& o : v.options) {
      for (const std::string& n : names_of(o)) {
        // The name as a word: "--top" must not pass because "--top-k" is listed.
        const std::regex word("(^|[\\s,])" + n + "([\\s,]|$)");
        EXPECT_TRUE(std::regex_search(r.output, word)) << v.name << ": " << n << "\n" << r.output;
      }
      EXPECT_NE(r.output.find(o.help), std::string::npos) << v.name << ": " << o.names;
      if (!o.default_text.empty()) {
        EXPECT_NE(r.output.find("(default: " + o.default_text + ")"), std::string::npos)
            << v.name << ": " << o.names << "\n"
            << r.output;
      }
      if (!o.value_name.empty()) {
        EXPECT_NE(r.output.find(names_of(o).back() + " " + o.value_name), std::string::npos)
            << v.name << ": " << o.names << "\n"
            << r.output;
      }
    }
    const Result h = run_kiri(v.name + " -h");
    EXPECT_EQ(h.code, 0) << h.output;
    EXPECT_EQ(h.output, r.output);
  }
  // kiri plan documents all of its 66 options (13 of them offload's, 3 LLaMA's dimensions, 1
  // selective recomputation's modules, 1 the training config's --set, 6 a cluster of hosts'
  // and 2 the attention's and the gradients' types), the 9 familiar flags of config keys
  // (config_flags.h) and the two every verb takes.
  EXPECT_EQ(kiri::cli::verb_spec("plan").options.size(), 77u);
}

TEST(CliHelp, TopLevelHelpListsTheVerbs) {
  for (const char* args : {"--help", "-h", "help"}) {
    const Result r = run_kiri(args);
    ASSERT_EQ(r.code, 0) << args << "\n" << r.output;
    for (const VerbSpec& v : kiri::cli::verb_specs())
      EXPECT_NE(r.output.find("  " + v.name + " "), std::string::npos) << v.name << r.output;
    EXPECT_NE(r.output.find("--version"), std::string::npos) << r.output;
  }
  const Result none = run_kiri("");
  EXPECT_EQ(none.code, 2) << none.output;
  EXPECT_NE(none.output.find("usage: kiri"), std::string::npos) << none.output;
  const Result one = run_kiri("help sample");
  EXPECT_EQ(one.code, 0) << one.output;
  EXPECT_EQ(one.output, run_kiri("sample --help").output);
}

TEST(CliHelp, VersionNamesTheBuild) {
  const Result r = run_kiri("--version");
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(r.output.rfind("kiri ", 0), 0u) << r.output;
  ASSERT_EQ(r.output.back(), '\n');
  const std::string version = r.output.substr(5, r.output.size() - 6);
  EXPECT_FALSE(version.empty());
  EXPECT_EQ(version.find_first_of(" \n"), std::string::npos) << r.output;  // one word, one line
}

TEST(CliErrors, OptionTyposSuggestTheOption) {
  struct Case {
    std::string args, suggestion;
  };
  for (const Case& c :
       {Case{"train --mem-limt 2GiB",
             "unknown option --mem-limt; did you mean "
             "--mem-limit?"},
        Case{"sample ck --top-j 3", "unknown option --top-j; did you mean --top-k?"},
        Case{"plan --zero-stgae 2", "did you mean --zero-stage?"},
        Case{"launch -n 2 --hostfle h -- train", "did you mean --hostfile?"},
        Case{"--verbsoe train", "unknown option --verbsoe; did you mean --verbose?"},
        Case{"trian", "unknown command 'trian'; did you mean train?"}}) {
    const Result r = run_kiri(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.suggestion), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(count(r.output, "kiri: config error: "), 1u) << r.output;
  }
}

TEST(CliErrors, ConfigKeyTyposSuggestTheKey) {
  Result r = run_kiri("config --set train.lrr=1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown key 'train.lrr'; did you mean train.lr?"), std::string::npos)
      << r.output;
  r = run_kiri("config --set trian.steps=1");
  EXPECT_NE(r.output.find("did you mean train.steps?"), std::string::npos) << r.output;
  // Nothing close: the section's keys instead.
  r = run_kiri("config --set train.frobnicate=1");
  EXPECT_NE(r.output.find("(keys of 'train': train.steps, "), std::string::npos) << r.output;
}

TEST(CliErrors, TheSourceLocationOnlyWithVerbose) {
  const std::regex location("\\[[a-z_]+\\.(cpp|h):[0-9]+\\]");
  for (const std::string args :
       {"config --set train.lrr=1", "train --frobnicate", "sample /nonexistent/ck", "trian"}) {
    const Result plain = run_kiri(args);
    EXPECT_NE(plain.code, 0) << plain.output;
    EXPECT_EQ(plain.output.rfind("kiri: ", 0), 0u) << plain.output;
    EXPECT_FALSE(std::regex_search(plain.output, location)) << plain.output;
    for (const std::string& verbose : {"--verbose " + args, args + " --verbose"}) {
      const Result v = run_kiri(verbose);
      EXPECT_EQ(v.code, plain.code) << v.output;
      EXPECT_TRUE(std::regex_search(v.output, location)) << verbose << "\n" << v.output;
    }
  }
}

TEST(CliErrors, OneRanksErrorsNameTheRankAndSharedOnesPrintOnRankZero) {
  // A config error every rank hits alike: rank 0 prints it, rank 1 only exits 2.
  Result r = run_kiri("config --set train.lrr=1", "OMPI_COMM_WORLD_RANK=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.output, "");
  r = run_kiri("config --set train.lrr=1", "PMI_RANK=0");
  EXPECT_EQ(r.output.rfind("kiri: config error: unknown key", 0), 0u) << r.output;
  // A checkpoint error concerns the rank that raised it.
  r = run_kiri("sample /nonexistent/ck", "SLURM_PROCID=3");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.output.rfind("kiri: rank 3: checkpoint error: ", 0), 0u) << r.output;
}

TEST(CliErrors, AConfigErrorUnderLaunchIsPrintedOnce) {
  const Result r = run_kiri("launch -n 2 -- train --set model.n_layr=2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_EQ(count(r.output, "unknown key 'model.n_layr'; did you mean model.n_layer?"), 1u)
      << r.output;
  EXPECT_EQ(count(r.output, "kiri: config error: "), 1u) << r.output;
  // After the world exists (the layout is checked against it): once as well.
  const Result w = run_kiri("launch -n 2 -- train " + std::string(KIRI_SOURCE_DIR) +
                            "/configs/tiny-byte.json --set parallel.dp=1 --set checkpoint.dir=");
  EXPECT_EQ(w.code, 2) << w.output;
  EXPECT_EQ(count(w.output, "= 1 but the world has 2 process(es)"), 1u) << w.output;
  // kiri --verbose launch passes --verbose to the ranks.
  const Result v = run_kiri("--verbose launch -n 2 -- train --set model.n_layr=2");
  EXPECT_EQ(count(v.output, "did you mean model.n_layer? [config_schema.cpp:"), 1u) << v.output;
  // Help under launch: once.
  const Result h = run_kiri("launch -n 2 -- train --help");
  EXPECT_EQ(h.code, 0) << h.output;
  EXPECT_EQ(count(h.output, "usage: kiri train"), 1u) << h.output;
}

TEST(CliDryRun, TrainChecksTheConfigAndTheWorldWithoutTraining) {
  const std::string config = std::string(KIRI_SOURCE_DIR) + "/configs/tiny-byte.json";
  Result r = run_kiri("train " + config + " --set train.steps=3 --dry-run");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\"steps\": 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("dry run: dp 1 x tp 1 x pp 1, zero 0, fp32"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;  // no training step
  r = run_kiri("train " + config + " --dry-run --set parallel.tp=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("world 1 is not a multiple of tp 2 x pp 1 = 2"), std::string::npos)
      << r.output;
  r = run_kiri("train " + config + " --dry-run --set parallel.dp=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("= 2 but the world has 1 process(es)"), std::string::npos) << r.output;
  r = run_kiri("train " + config + " --dry-run", "OMPI_COMM_WORLD_SIZE=2");  // dp inferred
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dry run: dp 2 x tp 1 x pp 1"), std::string::npos) << r.output;
  r = run_kiri("train " + config + " --dry-run --set parallel.dp=2", "OMPI_COMM_WORLD_SIZE=2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("dry run: dp 2 x tp 1 x pp 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on 2 rank(s)"), std::string::npos) << r.output;
}

TEST(CliDryRun, ParseOnlyChecksTheCommandLineOfEveryVerb) {
  const std::string env = "KIRI_PARSE_ONLY=1";
  for (const std::string args :
       {"train no-such-file.json --set train.lr=1e-3 --resume nowhere", "eval nowhere",
        "sample nowhere --prompt hi --tokens 3", "data in.txt --out dir", "bench --zero",
        "plan --model llama-7B --nodes 2", "config --markdown", "help train"}) {
    const Result r = run_kiri(args, env);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("the command line parses"), std::string::npos) << r.output;
  }
  Result r = run_kiri("launch -n 2 --threads 1 -- train --set parallel.dp=2", env);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("kiri train: the command line parses"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[kiri] launch: mpirun"), std::string::npos) << r.output;  // not run
  for (const std::string bad :
       {"train --set train.lrr=1", "train --set train.lr=fast", "sample", "launch -- train",
        "launch -n 2 -- train --bogus", "launch -n 2 -- trian", "plan --tpp 2"}) {
    r = run_kiri(bad, env);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.output;
    EXPECT_EQ(r.output.find("parses"), std::string::npos) << bad << "\n" << r.output;
  }
}

}  // namespace
