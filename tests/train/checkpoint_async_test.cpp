// Asynchronous checkpoints (checkpoint.async, checkpoint_async.h): the files equal a
// synchronous save's byte for byte on every layout; the staging buffers are counted in
// `buffers` and reused; `latest` moves only once every rank's file is there; a save waits
// for the previous one; a failed write is an error at the next step that leaves the
// previous checkpoint loadable; keep_last removes an old checkpoint only after the new one
// is committed.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/comm/local/local.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string latest_of(const std::string& root) {
  std::ifstream in(root + "/latest");
  std::string name;
  in >> name;
  return name;
}

RunConfig async_config(const std::string& root) {
  RunConfig c = byte_test_config(2, 2, 32, 2);
  c.model.vocab_size = 257;
  c.train.steps = 10;
  c.parallel.timeout_s = 60;
  c.checkpoint.dir = root;
  c.checkpoint.keep_last = 0;
  c.checkpoint.async = true;
  return c;
}

// Sets KIRI_FAULT for the scope (the writer's slowsave hook).
struct ScopedFault {
  explicit ScopedFault(const std::string& spec) { ::setenv("KIRI_FAULT", spec.c_str(), 1); }
  ~ScopedFault() { ::unsetenv("KIRI_FAULT"); }
};

struct Layout {
  int dp = 1, tp = 1, pp = 1, zero_stage = 0;
};

// The same run saved synchronously and asynchronously: every file of the step directory is
// the same, state.json's but for the config's checkpoint keys (and its checksum over them).
void expect_async_equals_sync(int ranks, const Layout& k, const std::string& name) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir(name);
  comm::run_local(ranks, [&](comm::Communicator& world) {
    for (const bool async : {false, true}) {
      RunConfig c = async_config(root + (async ? "/async" : "/sync"));
      c.parallel.dp = k.dp;
      c.parallel.tp = k.tp;
      c.parallel.pp = k.pp;
      c.parallel.microbatches = k.pp > 1 ? 2 : 1;
      c.parallel.zero_stage = k.zero_stage;
      c.checkpoint.async = async;
      c.checkpoint.max_shard_size = "20KB";  // shards and an index
      Trainer t(c, world);
      t.train_step();
      t.train_step();
      t.save_checkpoint();
      t.wait_for_checkpoint();
    }
    world.barrier();
  });
  const std::string sync = root + "/sync/step_00000002", async = root + "/async/step_00000002";
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(sync)) {
    const std::string f = e.path().filename().string();
    ++files;
    if (f == "state.json") {
      nlohmann::json a = nlohmann::json::parse(bytes_of(sync + "/" + f));
      nlohmann::json b = nlohmann::json::parse(bytes_of(async + "/" + f));
      // The config (checkpoint.async differs), and the checksum that covers it.
      for (nlohmann::json* j : {&a, &b}) {
        j->erase("config");
        j->erase("checksum");
      }
      EXPECT_EQ(a, b) << name;
    } else {
      EXPECT_EQ(bytes_of(sync + "/" + f), bytes_of(async + "/" + f)) << name << ": " << f;
    }
  }
  EXPECT_GT(files, 5u);
  size_t async_files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(async)) ++async_files;
  EXPECT_EQ(async_files, files) << name;  // nothing more (no failure marker, no temporary)
  EXPECT_EQ(latest_of(root + "/async"), "step_00000002");
}

TEST(CheckpointAsync, FilesEqualTheSynchronousSavesOnEveryLayout) {
  expect_async_equals_sync(1, {}, "one");
  expect_async_equals_sync(2, {.dp = 2}, "ddp");
  expect_async_equals_sync(2, {.dp = 2, .zero_stage = 1}, "zero1");
  expect_async_equals_sync(2, {.dp = 2, .zero_stage = 3}, "zero3");
  expect_async_equals_sync(2, {.tp = 2}, "tp");
  expect_async_equals_sync(2, {.pp = 2}, "pp");
}

// The staging buffers: in `buffers` from the start (allocated and touched when the trainer
// is built), as big as the model and both states (one rank writes everything), and the same
// ones for every save.
TEST(CheckpointAsync, StagingIsCountedInBuffersAndReused) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("staging");
  auto buffers = [](Trainer& t) {
    return t.allocator().stats().current[static_cast<int>(Category::kBuffers)];
  };
  RunConfig sync = async_config(root + "/sync");
  sync.checkpoint.async = false;
  Trainer plain(sync);
  plain.train_step();
  Trainer t(async_config(root + "/async"));
  t.train_step();
  const int64_t staged = buffers(t);
  const int64_t model = t.config().model.num_parameters() * 4;
  const int64_t states = 2 * t.optimizer().state_numel() * 4;
  EXPECT_GE(staged - buffers(plain), model + states);
  EXPECT_LT(staged - buffers(plain), model + states + (64 << 10));
  for (int i = 0; i < 3; ++i) {
    t.save_checkpoint();
    t.wait_for_checkpoint();
    EXPECT_EQ(buffers(t), staged) << i;
    t.train_step();
  }
  EXPECT_EQ(ckpt::list_checkpoints(root + "/async"), (std::vector<int64_t>{1, 2, 3}));
}

// ZeRO-1 on 2 ranks: both write an optimizer file. Rank 1's writer is held up (slowsave);
// until its file is in the temporary directory, `latest` still names the previous save.
TEST(CheckpointAsync, LatestMovesOnlyOnceEveryRanksFileIsThere) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("latest");
  ScopedFault slow("slowsave:1:800");
  comm::run_local(2, [&](comm::Communicator& world) {
    RunConfig c = async_config(root);
    c.parallel.dp = 2;
    c.parallel.zero_stage = 1;
    Trainer t(c, world);
    t.train_step();
    t.save_checkpoint();
    t.wait_for_checkpoint();  // step 1 committed (rank 1's writer slept 0.8 s before its file)
    world.barrier();
    t.train_step();
    t.save_checkpoint();
    if (world.rank() == 0) {
      const std::string theirs = ckpt::temp_dir(root, 2) + "/optimizer-00001-of-00002.safetensors";
      int looks = 0;
      while (!fs::exists(theirs) && !fs::exists(root + "/step_00000002")) {
        EXPECT_EQ(latest_of(root), "step_00000001");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ++looks;
      }
      EXPECT_GT(looks, 0);
    }
    t.wait_for_checkpoint();
    world.barrier();
    EXPECT_EQ(latest_of(root), "step_00000002");
  });
}

// A save waits for the previous one: when the second save_checkpoint returns, the first is
// committed, though its writer slept 300 ms before each file.
TEST(CheckpointAsync, ASaveWaitsForThePreviousOne) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("wait");
  ScopedFault slow("slowsave:0:300");
  Trainer t(async_config(root));
  t.train_step();
  t.save_checkpoint();
  EXPECT_FALSE(fs::exists(root + "/step_00000001"));  // still being written
  t.train_step();                                     // training goes on meanwhile
  t.save_checkpoint();
  EXPECT_TRUE(fs::exists(root + "/step_00000001/state.json"));
  t.wait_for_checkpoint();
  EXPECT_EQ(latest_of(root), "step_00000002");
}

// The writer fails (its temporary directory removed under it, as a lost mount would): the
// next step raises the I/O error naming the save, and the previous checkpoint loads.
TEST(CheckpointAsync, AFailedWriteIsAnErrorAtTheNextStepAndThePreviousCheckpointStays) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("fail");
  ScopedFault slow("slowsave:0:400");
  Trainer t(async_config(root));
  t.train_step();
  t.save_checkpoint();
  t.wait_for_checkpoint();
  t.train_step();
  t.save_checkpoint();
  const std::string tmp = ckpt::temp_dir(root, 2);
  while (!fs::exists(tmp + "/optimizer-00000-of-00001.safetensors"))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  fs::remove_all(tmp);  // the writer sleeps 400 ms before the model files
  // The first step that begins after the write failed raises it (steps before it train on).
  bool raised = false;
  for (int i = 0; i < 100 && !raised; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      t.train_step();
    } catch (const Error& e) {
      raised = true;
      EXPECT_EQ(e.kind(), ErrorKind::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find("the asynchronous checkpoint of step 2 failed on "
                                           "rank 0: cannot write " +
                                           tmp),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("latest still names the previous checkpoint"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_TRUE(raised);
  EXPECT_EQ(latest_of(root), "step_00000001");
  RunConfig c = async_config(root);
  Trainer again(c);
  again.load_checkpoint(root);
  EXPECT_EQ(again.step(), 1);
}

// keep_last = 2: while step 4 is being written, steps 2 and 3 are both there; once it is
// committed, step 2 goes.
TEST(CheckpointAsync, KeepLastRemovesAnOldCheckpointOnlyAfterTheNewOneIsCommitted) {
  omp_set_num_threads(1);
  const std::string root = kiri::testing::temp_dir("keep");
  RunConfig c = async_config(root);
  c.checkpoint.keep_last = 2;
  Trainer t(c);
  for (int s = 0; s < 3; ++s) {
    t.train_step();
    t.save_checkpoint();
  }
  t.wait_for_checkpoint();
  EXPECT_EQ(ckpt::list_checkpoints(root), (std::vector<int64_t>{2, 3}));
  ScopedFault slow("slowsave:0:300");
  t.train_step();
  t.save_checkpoint();
  EXPECT_EQ(ckpt::list_checkpoints(root), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(latest_of(root), "step_00000003");
  t.wait_for_checkpoint();
  EXPECT_EQ(ckpt::list_checkpoints(root), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(latest_of(root), "step_00000004");
}

}  // namespace
}  // namespace kiri::train
