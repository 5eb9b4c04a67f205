// The run's outputs at the function level: MetricsWriter checks every write (a full
// device is a kIo error naming the step), and RunLock keeps a second writer out of a
// run folder while letting a stale lock file through. tests/cli/outputs_test.cpp runs
// the binary on full filesystems and with concurrent runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/comm/self.h"
#include "kiri/train/metrics.h"
#include "kiri/train/run_dir.h"
#include "temp_dir.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

using kiri::testing::temp_dir;

StepMetrics row(int64_t step, int64_t total) {
  StepMetrics m;
  m.step = step;
  m.total_steps = total;
  m.loss = 5.25;
  return m;
}

// The error `f` raises; fails the test when it raises none.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error raised";
  return Error(ErrorKind::kInternal, "none", __FILE__, __LINE__);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(MetricsWriter, WritesWholeRowsAndSyncsTheLast) {
  const std::string path = temp_dir("rows") + "/sub/metrics.jsonl";
  {
    MetricsWriter w(path, /*append=*/false);
    ASSERT_TRUE(w.enabled());
    for (int64_t s = 1; s <= 3; ++s) w.write(row(s, 3));
    w.close();
    EXPECT_FALSE(w.enabled());
  }
  MetricsWriter(path, /*append=*/true).write(row(4, 4));
  std::ifstream in(path);
  int64_t expect = 1;
  for (std::string line; std::getline(in, line); ++expect) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int64_t>(), expect);
    EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 5.25);
  }
  EXPECT_EQ(expect, 5);
}

TEST(MetricsWriter, AFullDeviceIsAnIoErrorNamingTheStep) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  MetricsWriter w("/dev/full", /*append=*/true);
  const Error e = error_of([&] { w.write(row(7, 10)); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_TRUE(contains(e.message(),
                       "cannot write the metrics file '/dev/full' at step 7: No "
                       "space left on device"))
      << e.message();
}

TEST(MetricsWriter, AFolderOrAFifoWithoutReaderIsRefusedAtOnce) {
  const std::string dir = temp_dir("fifo");
  Error e = error_of([&] { MetricsWriter w(dir, false); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_TRUE(contains(e.message(), "cannot open the metrics file '" + dir + "': Is a directory"))
      << e.message();
  const std::string fifo = dir + "/metrics.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const auto t0 = std::chrono::steady_clock::now();
  e = error_of([&] { MetricsWriter w(fifo, true); });  // a blocking open would hang here
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_TRUE(contains(e.message(), "No such device or address")) << e.message();
}

TEST(RunLock, ASecondHolderIsRefusedNamingTheFirst) {
  const std::string dir = temp_dir("lock") + "/run";
  const std::string file = dir + "/.kiri.lock";
  {
    RunLock first;
    first.acquire(dir);  // creates the folder
    EXPECT_EQ(first.files(), std::vector<std::string>{file});
    const nlohmann::json rec = nlohmann::json::parse(std::ifstream(file));
    EXPECT_EQ(rec["pid"].get<int64_t>(), ::getpid());
    EXPECT_FALSE(rec["host"].get<std::string>().empty());
    EXPECT_EQ(rec["since"].get<std::string>().size(), 20u);  // 2026-12-01T09:44:00Z

    // flock belongs to the open file, so a second open in this process conflicts too.
    RunLock second;
    const Error e = error_of([&] { second.acquire(dir); });
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_TRUE(contains(e.message(), dir + " is in use by pid " + std::to_string(::getpid()) +
                                          " on host " + rec["host"].get<std::string>() + " since " +
                                          rec["since"].get<std::string>() + " (lock file " + file +
                                          ")"))
        << e.message();
    EXPECT_TRUE(second.files().empty());
  }
  EXPECT_FALSE(fs::exists(file));  // released and removed
  RunLock again;
  again.acquire(dir);
  EXPECT_TRUE(fs::exists(file));
}

TEST(RunLock, ALeftoverFileIsNotALock) {
  const std::string dir = temp_dir("stale");
  // A killed run's record, and junk: neither is held by anyone.
  for (const std::string& content :
       {std::string(R"({"pid":999999,"host":"elsewhere","since":"2026-01-01T00:00:00Z"})"),
        std::string(100000, '[')}) {
    std::ofstream(dir + "/.kiri.lock") << content;
    RunLock lock;
    lock.acquire(dir);
    const nlohmann::json rec = nlohmann::json::parse(std::ifstream(dir + "/.kiri.lock"));
    EXPECT_EQ(rec["pid"].get<int64_t>(), ::getpid());
  }
}

TEST(RunLock, AnUnusableLockFileIsAnIoError) {
  const std::string dir = temp_dir("unusable");
  fs::create_directories(dir + "/.kiri.lock");
  RunLock lock;
  const Error e = error_of([&] { lock.acquire(dir); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_TRUE(contains(e.message(), "cannot open the lock file " + dir + "/.kiri.lock"))
      << e.message();
}

TEST(RunLock, LocksTheCheckpointFolderOutsideTheRunFolderToo) {
  const std::string base = temp_dir("two");
  RunConfig c = default_run_config();
  c.run.dir = base + "/run";
  c.checkpoint.dir = base + "/elsewhere/ckpt";
  const auto world = comm::self_communicator();
  {
    const RunLock lock = lock_run_folder(c, *world);
    EXPECT_EQ(lock.files(), (std::vector<std::string>{base + "/run/.kiri.lock",
                                                      base + "/elsewhere/ckpt/.kiri.lock"}));
    RunLock other;
    EXPECT_EQ(error_of([&] { other.acquire(c.checkpoint.dir); }).kind(), ErrorKind::kConfig);
  }
  c.checkpoint.dir = base + "/run/checkpoints";  // inside: run.dir's lock covers it
  const RunLock lock = lock_run_folder(c, *world);
  EXPECT_EQ(lock.files(), std::vector<std::string>{base + "/run/.kiri.lock"});
}

}  // namespace
}  // namespace kiri::train
