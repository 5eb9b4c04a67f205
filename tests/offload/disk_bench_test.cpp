#include "kiri/offload/disk_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiri/base/error.h"
#include "offload/offload_test_util.h"

namespace kiri::offload {

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions& options);  // async_io_uring.cpp

namespace {

namespace fs = std::filesystem;
using testing::ScopedMount;
using testing::TempDir;

bool empty_dir(const std::string& dir) {
  return fs::is_empty(dir);
}

IoOptions io(kiri::IoEngine engine, int depth, int64_t block) {
  IoOptions o;
  o.engine = engine;
  o.queue_depth = depth;
  o.block_size = block;
  return o;
}

TEST(DiskBench, MeasuresBothPassesDirectAndRemovesItsFile) {
  TempDir dir("bench");
  for (const kiri::IoEngine engine : {kiri::IoEngine::kThreads, kiri::IoEngine::kIoUring}) {
    if (engine == kiri::IoEngine::kIoUring && !make_io_uring(IoOptions{})) continue;
    // 8 MiB + 12 KiB: the last request is shorter than a block.
    const DiskBandwidth bw =
        measure_disk_bandwidth(dir.path(), (8 << 20) + 12288, io(engine, 4, 1 << 20));
    EXPECT_EQ(bw.engine, kiri::name(engine));
    EXPECT_TRUE(bw.direct) << "ext4 takes O_DIRECT";
    // Above 1 MB/s and below 1 TB/s: a pass was timed, and it moved the bytes (a
    // zero or near-zero time would give an absurd rate).
    EXPECT_GT(bw.write_bytes_per_s, 1e6);
    EXPECT_LT(bw.write_bytes_per_s, 1e12);
    EXPECT_GT(bw.read_bytes_per_s, 1e6);
    EXPECT_LT(bw.read_bytes_per_s, 1e12);
    EXPECT_TRUE(empty_dir(dir.path())) << "the scratch file is left behind";
  }
}

TEST(DiskBench, BufferedWhereTheFilesystemRefusesODirect) {
  ScopedMount ram("bench_ramfs", "ramfs", nullptr);
  if (!ram.ok()) GTEST_SKIP() << ram.why() << " (needs root or CAP_SYS_ADMIN)";
  const DiskBandwidth bw =
      measure_disk_bandwidth(ram.path(), 2 << 20, io(kiri::IoEngine::kThreads, 2, 256 << 10));
  EXPECT_FALSE(bw.direct);
  EXPECT_GT(bw.read_bytes_per_s, 1e6);
  EXPECT_TRUE(empty_dir(ram.path()));
}

TEST(DiskBench, FullDiskIsAnIoErrorAndLeavesNothing) {
  ScopedMount small("bench_enospc", "tmpfs", "size=2m");
  if (!small.ok()) GTEST_SKIP() << small.why() << " (needs root or CAP_SYS_ADMIN)";
  try {
    measure_disk_bandwidth(small.path(), 8 << 20, io(kiri::IoEngine::kAuto, 8, 1 << 20));
    ADD_FAILURE() << "8 MiB measured on a 2 MiB disk";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    for (const char* t : {"cannot measure the disk under ", "reserving 8.00 MiB",
                          "No space left on device", "the disk is full"})
      EXPECT_NE(e.message().find(t), std::string::npos) << t << " not in: " << e.message();
    EXPECT_NE(e.message().find(small.path()), std::string::npos) << e.message();
  }
  EXPECT_TRUE(empty_dir(small.path()));
}

TEST(DiskBench, MissingFolderOrAFileIsAnIoErrorNamingIt) {
  TempDir dir("bench_missing");
  const std::string missing = dir.path() + "/no/such/folder";
  const std::string file = dir.path() + "/a_file";
  std::ofstream(file) << "x";
  for (const auto& [path, why] :
       {std::pair{missing, "No such file or directory"}, std::pair{file, "Not a directory"}}) {
    try {
      measure_disk_bandwidth(path, 1 << 20, io(kiri::IoEngine::kThreads, 2, 1 << 20));
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(why), std::string::npos) << e.message();
    }
  }
}

}  // namespace
}  // namespace kiri::offload
