#include "kiri/ckpt/checkpoint_dir.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"

namespace kiri::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::expect_refused;
using testing::list_dir;
using testing::save_step;
using testing::TempDir;

TEST(CheckpointDir, StepNames) {
  EXPECT_EQ(step_dir_name(100), "step_00000100");
  EXPECT_EQ(step_dir_name(0), "step_00000000");
  EXPECT_EQ(step_dir_name(123456789), "step_123456789");
}

TEST(CheckpointDir, CommitPublishesAndResolves) {
  TempDir tmp;
  const std::string root = tmp / "run";  // created by begin
  const std::string dir = begin_checkpoint(root, 100);
  EXPECT_EQ(dir, root + "/.step_00000100.tmp");
  write_file_atomic(dir + "/state.json", "{}");
  EXPECT_EQ(commit_checkpoint(root, 100), root + "/step_00000100");
  EXPECT_EQ(list_dir(root), (std::vector<std::string>{"latest", "step_00000100"}));
  EXPECT_EQ(read_file(root + "/latest"), "step_00000100\n");
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000100");
  EXPECT_EQ(resolve_checkpoint(root + "/step_00000100"), root + "/step_00000100");
  EXPECT_EQ(list_checkpoints(root), std::vector<int64_t>{100});
}

TEST(CheckpointDir, CrashBeforeCommitKeepsPreviousCheckpoint) {
  TempDir tmp;
  const std::string root = tmp.path();
  save_step(root, 100);
  // A save of step 200 that dies halfway: a partial file, no commit.
  const std::string dir = begin_checkpoint(root, 200);
  write_file_atomic(dir + "/model.safetensors", "half of the wei");
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000100");
  EXPECT_EQ(read_file(root + "/latest"), "step_00000100\n");
  EXPECT_EQ(list_checkpoints(root), std::vector<int64_t>{100});
  // The restarted run begins step 200 again: the stale directory is replaced.
  const std::string again = begin_checkpoint(root, 200);
  EXPECT_TRUE(list_dir(again).empty());
  write_file_atomic(again + "/state.json", "{\"step\": 200}");
  commit_checkpoint(root, 200);
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000200");
}

TEST(CheckpointDir, CommitWithoutStateJsonIsRefused) {
  TempDir tmp;
  save_step(tmp.path(), 100);
  const std::string dir = begin_checkpoint(tmp.path(), 200);
  write_file_atomic(dir + "/model.safetensors", "w");
  expect_refused([&] { commit_checkpoint(tmp.path(), 200); }, {"state.json", "step_00000200"});
  expect_refused([&] { commit_checkpoint(tmp.path(), 300); }, {"begin_checkpoint"});
  EXPECT_EQ(resolve_checkpoint(tmp.path()), tmp / "step_00000100");
}

TEST(CheckpointDir, RecommittingAStepReplacesIt) {
  TempDir tmp;
  save_step(tmp.path(), 100);
  const std::string dir = begin_checkpoint(tmp.path(), 100);
  write_file_atomic(dir + "/state.json", "new");
  commit_checkpoint(tmp.path(), 100);
  EXPECT_EQ(read_file(tmp / "step_00000100/state.json"), "new");
  EXPECT_FALSE(fs::exists(tmp / "step_00000100/model.safetensors"));
  EXPECT_EQ(list_dir(tmp.path()), (std::vector<std::string>{"latest", "step_00000100"}));
}

TEST(CheckpointDir, KeepLastPrunesOlderSteps) {
  TempDir tmp;
  const std::string root = tmp.path();
  for (int64_t step : {100, 200, 300}) save_step(root, step);
  fs::create_directory(root + "/notes");  // not a step directory: left alone
  save_step(root, 400, /*keep_last=*/2);
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{300, 400}));
  EXPECT_EQ(list_dir(root),
            (std::vector<std::string>{"latest", "notes", "step_00000300", "step_00000400"}));
  // keep_last never removes the checkpoint just committed, even an older step, and leaves
  // the higher steps of an earlier attempt alone.
  save_step(root, 50, 1);
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{50, 300, 400}));
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000050");
}

// A run resumed from step 4 of an attempt that reached step 8: pruning counts only the
// resumed run's steps, so its newest checkpoints survive (counting the attempt's 8 would
// have removed the 5 just saved and left `latest` naming a deleted folder).
TEST(CheckpointDir, KeepLastAfterAResumeKeepsTheResumedRunsNewest) {
  TempDir tmp;
  const std::string root = tmp.path();
  for (int64_t step : {2, 4, 6, 8}) save_step(root, step);
  save_step(root, 5, /*keep_last=*/2);
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{4, 5, 6, 8}));
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000005");
  save_step(root, 6, 2);  // replaces the attempt's step 6
  EXPECT_EQ(list_checkpoints(root), (std::vector<int64_t>{5, 6, 8}));
  EXPECT_EQ(resolve_checkpoint(root), root + "/step_00000006");
}

TEST(CheckpointDir, ResolveRefusesNonCheckpoints) {
  TempDir tmp;
  expect_refused([&] { resolve_checkpoint(tmp.path()); },
                 {"no checkpoint in " + tmp.path(), "neither state.json nor latest"});
  expect_refused([&] { resolve_checkpoint(tmp / "missing"); }, {"does not exist"});
  write_file_atomic(tmp / "latest", "step_00000700\n");
  expect_refused([&] { resolve_checkpoint(tmp.path()); }, {"step_00000700", "state.json"});
  write_file_atomic(tmp / "latest", "../elsewhere");
  expect_refused([&] { resolve_checkpoint(tmp.path()); }, {"latest", "../elsewhere"});
  write_file_atomic(tmp / "latest", "\n");
  expect_refused([&] { resolve_checkpoint(tmp.path()); }, {"latest"});
}

TEST(CheckpointDir, ListIgnoresTempAndOtherEntries) {
  TempDir tmp;
  EXPECT_TRUE(list_checkpoints(tmp / "missing").empty());
  save_step(tmp.path(), 7);
  begin_checkpoint(tmp.path(), 9);
  fs::create_directory(tmp / "step_abc");
  write_file_atomic(tmp / "step_00000011", "a file, not a directory");
  EXPECT_EQ(list_checkpoints(tmp.path()), std::vector<int64_t>{7});
}

TEST(CheckpointDir, RemoveCheckpointsRemovesOnlyTheProtocolsEntries) {
  TempDir tmp;
  EXPECT_TRUE(remove_checkpoints(tmp / "missing").empty());
  save_step(tmp.path(), 7);
  save_step(tmp.path(), 8);
  begin_checkpoint(tmp.path(), 9);  // a crashed save
  fs::create_directory(tmp / ".step_00000006.old");
  fs::create_directory(tmp / "step_abc");
  write_file_atomic(tmp / "notes.txt", "the user's");
  write_file_atomic(tmp / ".step_x.tmp", "not kiri's name");
  const std::string root = tmp.path();
  EXPECT_EQ(remove_checkpoints(root),
            (std::vector<std::string>{root + "/.step_00000006.old", root + "/.step_00000009.tmp",
                                      root + "/latest", root + "/step_00000007",
                                      root + "/step_00000008"}));
  EXPECT_EQ(list_dir(root), (std::vector<std::string>{".step_x.tmp", "notes.txt", "step_abc"}));
}

}  // namespace
}  // namespace kiri::ckpt
