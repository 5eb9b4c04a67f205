// The third hostile probe's unclear messages (issue 25, item 6h), through the kiri binary:
// each is now a named error with its exit code, naming the flag, path, key and value.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/run_kiri.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;

void expect_exit(const std::string& args, int code, const std::vector<std::string>& parts) {
  const Result r = run_kiri(args, "timeout 60 env");
  EXPECT_EQ(r.code, code) << args << "\n" << r.output;
  for (const std::string& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << args << "\nlacks: " << p << "\n" << r.output;
  EXPECT_EQ(r.output.find("unexpected error"), std::string::npos) << r.output;
}

// An empty value for a flag that names a file or folder names the flag, not the filesystem.
TEST(ProbeMessages, EmptyPathFlagsAreNamed) {
  expect_exit("train --init-from ''", 2,
              {"kiri: config error: --init-from is empty: give the MODEL_DIR it names"});
  expect_exit("export runs/nowhere --out ''", 2,
              {"kiri: config error: --out is empty: give the DIR it names"});
  expect_exit("data in.txt --out ''", 2, {"--out is empty: give the DIR it names"});
  expect_exit("train --deepspeed ''", 2,
              {"--deepspeed is empty: give the DS_CONFIG.json it names"});
}

// A loop of symbolic links among the inputs is named with its path, in a folder or given.
TEST(ProbeMessages, SymlinkLoopInDataInputIsNamed) {
  const std::string dir = kiri::testing::temp_dir("loop");
  fs::create_directories(dir + "/docs");
  std::ofstream(dir + "/docs/a.txt") << "Call me Ishmael. Some years ago, never mind how long.\n";
  fs::create_symlink(dir + "/docs/b", dir + "/docs/loop");
  fs::create_symlink(dir + "/docs/loop", dir + "/docs/b");
  for (const std::string& input : {dir + "/docs", dir + "/docs/loop"}) {
    const std::string looped = input == dir + "/docs" ? dir + "/docs/b" : input;
    expect_exit("data " + input + " --out " + dir + "/out --tokenizer byte", 1,
                {"kiri: data error: input " + looped +
                 " is a loop of symbolic links (following it leads back to itself: Too many "
                 "levels of symbolic links); remove the link or point it at a file or folder"});
  }
}

// A DeepSpeed key holding a NUL is printed whole, escaped as JSON writes it.
TEST(ProbeMessages, DeepSpeedKeyWithANulIsPrintedEscaped) {
  const std::string dir = kiri::testing::temp_dir("nul");
  std::ofstream(dir + "/ds.json") << R"({"gradient\u0000clipping": 1.0})";
  const Result r = run_kiri("train --deepspeed " + dir + "/ds.json --dry-run");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("  - gradient\\u0000clipping = 1.0: not supported: not a DeepSpeed key "
                          "kiri maps"),
            std::string::npos)
      << r.output;
}

// A static fp16 loss scale that overflows every gradient is refused before any work.
TEST(ProbeMessages, ImpossibleStaticLossScaleIsRefused) {
  expect_exit("config --set train.dtype=fp16 --set train.loss_scale=1e30", 2,
              {"train.loss_scale = 1e+30 is an impossible static loss scale: above 65504 x 2^24 "
               "= 1098974756864 even fp16's smallest gradient, 2^-24, overflows fp16's largest "
               "number, 65504, once scaled"});
}

}  // namespace
