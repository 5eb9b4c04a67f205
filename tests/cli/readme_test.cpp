// README.md's "Using it" block runs top to bottom, as a newcomer would paste it after
// `make demo`: each line in order, in a scratch folder laid out like a clone (build/kiri,
// configs/, data/), after a short stand-in for make demo's run (runs/demo). The only change
// is fewer steps: every `--max-steps N` becomes 2. Each command must exit 0; the first that
// does not is named with its output. (docs_commands_test.cpp checks that every documented
// command parses; this one runs them.)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

// The logical lines (continuations joined) of the first ```sh block after `heading`.
std::vector<std::string> block_after(const std::string& file, const std::string& heading) {
  std::ifstream in(file);
  std::vector<std::string> out;
  bool found = false, fenced = false;
  std::string joined;
  for (std::string line; std::getline(in, line);) {
    if (!found) {
      found = line == heading;
      continue;
    }
    if (!fenced) {
      fenced = line.rfind("```sh", 0) == 0;
      continue;
    }
    if (line.rfind("```", 0) == 0) break;
    const bool continued = !line.empty() && line.back() == '\\';
    joined += continued ? line.substr(0, line.size() - 1) : line;
    if (continued) continue;
    out.push_back(joined);
    joined.clear();
  }
  return out;
}

// The command with fewer steps: every --max-steps N is 2.
std::string shortened(const std::string& line) {
  static const std::regex steps("--max-steps [0-9]+");
  return std::regex_replace(line, steps, "--max-steps 2");
}

TEST(ReadmeSlow, UsingItRunsTopToBottom) {
  const fs::path source = KIRI_SOURCE_DIR;
  const std::vector<std::string> lines = block_after(source / "README.md", "## Using it");
  ASSERT_GE(lines.size(), 15u) << "README.md's \"## Using it\" block was not found";
  const std::string scratch = kiri::testing::temp_dir("readme");
  fs::create_directories(scratch + "/build");
  fs::create_symlink(KIRI_BINARY, scratch + "/build/kiri");
  fs::create_directory_symlink(source / "configs", scratch + "/configs");
  fs::create_directory_symlink(source / "data", scratch + "/data");
  // make demo's run, short: what its eval and sample lines read.
  std::vector<std::string> commands = {
      "build/kiri train configs/demo.json --overwrite --set run.name=demo --max-steps 2"};
  for (const std::string& l : lines) commands.push_back(shortened(l));
  for (const std::string& cmd : commands) {
    const auto t0 = std::chrono::steady_clock::now();
    const kiri::testing::Result r =
        // In a subshell, ended by a newline: the line's own # comment ends there.
        kiri::testing::run_shell("cd " + scratch + " && (OMP_NUM_THREADS=1 " + cmd + "\n)");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%5.1f s  %s\n", s, cmd.c_str());
    ASSERT_EQ(r.code, 0) << cmd << "\n" << r.output;
  }
  // Each run went into its own folder.
  for (const char* run : {"demo", "tiny-byte", "llama-tiny", "tiny-bf16", "logged", "ddp", "fsdp"})
    EXPECT_TRUE(fs::exists(scratch + "/runs/" + run + "/metrics.jsonl")) << run;
  bool tensorboard = false;
  for (const auto& e : fs::directory_iterator(scratch + "/runs/logged"))
    tensorboard |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_TRUE(tensorboard);
  EXPECT_TRUE(fs::exists(scratch + "/runs/logged/metrics.csv"));
}

}  // namespace
