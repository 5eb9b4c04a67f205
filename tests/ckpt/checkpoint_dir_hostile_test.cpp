// The checkpoint directory protocol against hostile roots: `latest` pointing at a
// temporary folder, huge or not a regular file, and the stale temporaries a killed save
// leaves behind.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/checkpoint_dir.h"

namespace kiri::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::expect_refused;
using testing::list_dir;
using testing::save_step;
using testing::TempDir;

TEST(CheckpointDirHostile, LatestNamesOnlyStepDirectories) {
  TempDir tmp;
  save_step(tmp.path(), 5);
  // A temporary folder with a state.json in it: a save that never committed.
  const std::string t = begin_checkpoint(tmp.path(), 6);
  write_file_atomic(t + "/state.json", "{}");
  for (const std::string bad : {".step_00000006.tmp", ".step_00000005.old", "step_", "step_12x",
                                "step_-1", "..", "step_1234567890123456789"}) {
    write_file_atomic(tmp / "latest", bad + "\n");
    expect_refused([&] { resolve_checkpoint(tmp.path()); },
                   {"latest holds '" + bad + "'", "not the name of a step directory"});
  }
  write_file_atomic(tmp / "latest", "step_00000005\n");
  EXPECT_EQ(resolve_checkpoint(tmp.path()), tmp / "step_00000005");
}

TEST(CheckpointDirHostile, AHugeLatestIsRefusedWithABoundedMessage) {
  TempDir tmp;
  std::ofstream(tmp / "latest") << std::string(50 << 20, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  try {
    resolve_checkpoint(tmp.path());
    FAIL() << "a 50 MB latest was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint);
    const std::string m = e.what();
    EXPECT_NE(m.find("52428800 bytes, more than the 4096 allowed"), std::string::npos) << m;
    EXPECT_LT(m.size(), 1000u);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  // Just under the cap but no step name: the quote is bounded too.
  write_file_atomic(tmp / "latest", std::string(4000, 'b'));
  try {
    resolve_checkpoint(tmp.path());
    FAIL() << "a 4000-character latest was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(4000 characters)"), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 600u);
  }
}

TEST(CheckpointDirHostile, ALatestThatIsNotARegularFileDoesNotBlock) {
  TempDir tmp;
  ASSERT_EQ(::mkfifo((tmp / "latest").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  expect_refused([&] { resolve_checkpoint(tmp.path()); }, {"latest", "is a FIFO"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  fs::remove(tmp / "latest");
  fs::create_directory(tmp / "latest");
  expect_refused([&] { resolve_checkpoint(tmp.path()); }, {"latest", "is a directory"});
}

TEST(CheckpointDirHostile, StaleTempDirsAreRemovedAndNothingElse) {
  TempDir tmp;
  save_step(tmp.path(), 2);
  begin_checkpoint(tmp.path(), 4);  // killed before commit
  write_file_atomic(tmp / ".step_00000004.tmp/model.safetensors", "half");
  begin_checkpoint(tmp.path(), 123456789);
  fs::create_directory(tmp / ".step_00000003.old");  // may be the only copy of step 3
  fs::create_directory(tmp / ".step_abc.tmp");       // not a name the protocol gives
  fs::create_directory(tmp / "notes.tmp");
  EXPECT_EQ(remove_stale_temp_dirs(tmp.path()),
            (std::vector<std::string>{tmp / ".step_00000004.tmp", tmp / ".step_123456789.tmp"}));
  EXPECT_EQ(list_dir(tmp.path()),
            (std::vector<std::string>{".step_00000003.old", ".step_abc.tmp", "latest", "notes.tmp",
                                      "step_00000002"}));
  EXPECT_TRUE(remove_stale_temp_dirs(tmp.path()).empty());
  EXPECT_TRUE(remove_stale_temp_dirs(tmp / "missing").empty());
  EXPECT_EQ(resolve_checkpoint(tmp.path()), tmp / "step_00000002");
}

}  // namespace
}  // namespace kiri::ckpt
