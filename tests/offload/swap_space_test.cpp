#include "kiri/offload/swap_space.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "kiri/base/error.h"
#include "offload/offload_test_util.h"

namespace kiri::offload {

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions& options);  // async_io_uring.cpp

namespace {

namespace fs = std::filesystem;
using testing::PageBuffer;
using testing::ScopedMount;
using testing::TempDir;

constexpr int64_t kKiB = 1024;

SwapOptions options(const std::string& dir, kiri::IoEngine engine = kiri::IoEngine::kThreads,
                    int64_t block = 8 * kKiB) {
  SwapOptions o;
  o.dir = dir;
  o.io.engine = engine;
  o.io.queue_depth = 3;
  o.io.block_size = block;
  return o;
}

// The error `fn` raises, after checking its kind and that it names every text.
template <typename Fn>
std::string expect_error(ErrorKind kind, std::initializer_list<std::string> texts, Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const std::string& t : texts)
      EXPECT_NE(e.message().find(t), std::string::npos) << "'" << t << "' not in: " << e.message();
    return e.message();
  }
  ADD_FAILURE() << "no error";
  return "";
}

class SwapSpaceTest : public ::testing::TestWithParam<kiri::IoEngine> {
 protected:
  void SetUp() override {
    IoOptions o;
    if (GetParam() == kiri::IoEngine::kIoUring && !make_io_uring(o))
      GTEST_SKIP() << "this kernel refuses io_uring (io_uring_setup)";
  }
  std::string name(const std::string& what) const { return what + "_" + kiri::name(GetParam()); }
};

TEST_P(SwapSpaceTest, RoundTripWithAPartialLastBlock) {
  TempDir dir(name("roundtrip"));
  Allocator a;
  SwapSpace swap(options(dir.path() + "/rank00000", GetParam()), a);
  EXPECT_STREQ(swap.engine_name(), kiri::name(GetParam()));
  EXPECT_TRUE(swap.direct());  // ext4 under /tmp
  const int64_t bytes = 3 * 8 * kKiB + 100;
  const int f = swap.create("unit00000.exp_avg.swp", bytes, Category::kOptimizerStates);
  PageBuffer out(4 * 8 * kKiB), in(4 * 8 * kKiB);
  out.fill(1);
  swap.wait(swap.write(f, 0, out.data(), bytes));
  swap.wait(swap.read(f, 0, in.data(), bytes));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(bytes)), 0);
  // One block in the middle, then the last (partial) block alone.
  out.fill(2);
  swap.wait(swap.write(f, 8 * kKiB, out.data(), 8 * kKiB));
  swap.wait(swap.read(f, 8 * kKiB, in.data(), 8 * kKiB));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(8 * kKiB)), 0);
  swap.wait(swap.read(f, 24 * kKiB, in.data(), 100));
  EXPECT_EQ(swap.bytes_written(), bytes + 8 * kKiB);
  EXPECT_EQ(swap.bytes_read(), bytes + 8 * kKiB + 100);
}

TEST_P(SwapSpaceTest, BitFlipIsAChecksumErrorNamingFileAndBlock) {
  TempDir dir(name("bitflip"));
  Allocator a;
  SwapSpace swap(options(dir.path(), GetParam()), a);
  const int64_t bytes = 4 * 8 * kKiB;
  const int f = swap.create("unit00003.master.swp", bytes, Category::kOptimizerStates);
  PageBuffer out(bytes), in(bytes);
  out.fill(3);
  swap.wait(swap.write(f, 0, out.data(), bytes));
  // One byte of block 2 changed behind the SwapSpace's back.
  const int fd = ::open(swap.path(f).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const unsigned char flipped = out.data()[2 * 8 * kKiB + 77] ^ 0x10;
  ASSERT_EQ(::pwrite(fd, &flipped, 1, 2 * 8 * kKiB + 77), 1);
  ::close(fd);
  swap.wait(swap.read(f, 0, in.data(), 2 * 8 * kKiB));  // blocks 0 and 1 are intact
  expect_error(ErrorKind::kIo,
               {swap.path(f), "block 2 (bytes 16384 to 24576)", "does not match the checksum"},
               [&] { swap.wait(swap.read(f, 0, in.data(), bytes)); });
}

TEST_P(SwapSpaceTest, TruncatedOrDeletedFilesAreNamed) {
  TempDir dir(name("truncated"));
  Allocator a;
  SwapSpace swap(options(dir.path(), GetParam()), a);
  const int64_t bytes = 4 * 8 * kKiB;
  const int kept = swap.create("unit00000.exp_avg.swp", bytes, Category::kOptimizerStates);
  const int cut = swap.create("unit00001.exp_avg.swp", bytes, Category::kOptimizerStates);
  PageBuffer out(bytes), in(bytes);
  out.fill(4);
  swap.wait(swap.write(kept, 0, out.data(), bytes));
  swap.wait(swap.write(cut, 0, out.data(), bytes));
  swap.check_files();  // all there
  ASSERT_EQ(::truncate(swap.path(cut).c_str(), 8 * kKiB), 0);
  expect_error(ErrorKind::kIo, {swap.path(cut), "truncated to 8192 of 32768 bytes"},
               [&] { swap.check_files(); });
  // Read without checking first: the short read is named too.
  expect_error(ErrorKind::kIo, {swap.path(cut), "moved 8192 of 32768 bytes", "truncated"},
               [&] { swap.wait(swap.read(cut, 0, in.data(), bytes)); });
  // Deleted: check_files names it before anything reads it.
  ASSERT_EQ(::unlink(swap.path(cut).c_str()), 0);
  expect_error(ErrorKind::kIo, {swap.path(cut), "deleted or replaced"},
               [&] { swap.check_files(); });
  swap.wait(swap.read(kept, 0, in.data(), bytes));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(bytes)), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, SwapSpaceTest,
                         ::testing::Values(kiri::IoEngine::kThreads, kiri::IoEngine::kIoUring),
                         [](const auto& info) {
                           return std::string(info.param == kiri::IoEngine::kThreads ? "threads"
                                                                                     : "io_uring");
                         });

TEST(SwapSpace, SecondSwapSpaceOnTheSameFolderIsAConfigError) {
  TempDir dir("locked");
  Allocator a;
  const std::string rank = dir.path() + "/rank00001";
  {
    SwapSpace first(options(rank), a);
    expect_error(ErrorKind::kConfig, {rank, "in use by another run", "its own offload.path"},
                 [&] { SwapSpace second(options(rank), a); });
  }
  SwapSpace after(options(rank), a);  // the lock went with the first
  EXPECT_EQ(after.dir(), rank);
}

TEST(SwapSpace, FilesRemovedAtDestructionUnlessKept) {
  TempDir dir("remove");
  Allocator a;
  const std::string rank = dir.path() + "/rank00000";
  std::string path;
  {
    SwapSpace swap(options(rank), a);
    path = swap.path(swap.create("unit00000.master.swp", 5000, Category::kOptimizerStates));
    EXPECT_TRUE(fs::exists(path));
    EXPECT_EQ(fs::file_size(path), 8192u);  // rounded up to 4 KiB
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(rank)) << "the empty rank folder stays";
  PageBuffer out(8 * kKiB), in(8 * kKiB);
  out.fill(6);
  {
    SwapSpace swap(options(rank), a);
    const int f = swap.create("unit00000.master.swp", 8 * kKiB, Category::kOptimizerStates);
    swap.wait(swap.write(f, 0, out.data(), 8 * kKiB));
    swap.keep_files(true);
  }
  EXPECT_TRUE(fs::exists(path));
  // A resumed run finds the same name and reuses the file: rewritten before it is read.
  SwapSpace swap(options(rank), a);
  const int f = swap.create("unit00000.master.swp", 8 * kKiB, Category::kOptimizerStates);
  EXPECT_EQ(swap.path(f), path);
  expect_error(ErrorKind::kInternal, {"block 0", path, "read before it was written"},
               [&] { swap.wait(swap.read(f, 0, in.data(), 8 * kKiB)); });
}

TEST(SwapSpace, AccountsFilesOnTheNvmeTier) {
  TempDir dir("accounting");
  Allocator a;
  {
    SwapSpace swap(options(dir.path()), a);
    swap.create("unit00000.master.swp", 3000, Category::kOptimizerStates);
    swap.create("unit00000.exp_avg.swp", 40000, Category::kOptimizerStates);
    swap.create("unit00000.params.swp", 12288, Category::kParameters);
    const MemoryStats s = a.stats();
    EXPECT_EQ(s.nvme_of(Category::kOptimizerStates), 43000);  // logical bytes, not on-disk
    EXPECT_EQ(s.nvme_of(Category::kParameters), 12288);
    EXPECT_EQ(s.nvme_of(Category::kGradients), 0);
    EXPECT_EQ(s.nvme_total(), 55288);
    EXPECT_EQ(s.allocated, 0) << "swap files are not RAM";
  }
  EXPECT_EQ(a.stats().nvme_total(), 0);
  {
    SwapSpace swap(options(dir.path()), a);
    swap.create("unit00000.master.swp", 4096, Category::kOptimizerStates);
    swap.keep_files(true);  // kept on disk, but no longer this run's
  }
  EXPECT_EQ(a.stats().nvme_total(), 0);
}

TEST(SwapSpace, FullDiskIsAnIoErrorAtCreate) {
  ScopedMount small("enospc", "tmpfs", "size=2m");
  if (!small.ok()) GTEST_SKIP() << small.why() << " (needs root or CAP_SYS_ADMIN)";
  Allocator a;
  SwapSpace swap(options(small.path() + "/rank00000"), a);
  swap.create("unit00000.master.swp", 1024 * kKiB, Category::kOptimizerStates);  // fits
  const std::string path = small.path() + "/rank00000/unit00000.exp_avg.swp";
  expect_error(
      ErrorKind::kIo,
      {"cannot reserve 4.00 MiB", path, "No space left on device",
       "the disk of offload.path is full"},
      [&] { swap.create("unit00000.exp_avg.swp", 4096 * kKiB, Category::kOptimizerStates); });
  EXPECT_FALSE(fs::exists(path)) << "the file that did not fit is removed";
  EXPECT_EQ(a.stats().nvme_of(Category::kOptimizerStates), 1024 * kKiB);
}

TEST(SwapSpace, FilesystemWithoutODirectIsUsedBuffered) {
  ScopedMount ram("ramfs", "ramfs", nullptr);
  if (!ram.ok()) GTEST_SKIP() << ram.why() << " (needs root or CAP_SYS_ADMIN)";
  Allocator a;
  SwapSpace swap(options(ram.path()), a);
  const int f = swap.create("unit00000.master.swp", 16 * kKiB, Category::kOptimizerStates);
  EXPECT_FALSE(swap.direct());
  PageBuffer out(16 * kKiB), in(16 * kKiB);
  out.fill(9);
  swap.wait(swap.write(f, 0, out.data(), 16 * kKiB));
  swap.wait(swap.read(f, 0, in.data(), 16 * kKiB));
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(16 * kKiB)), 0);
}

}  // namespace
}  // namespace kiri::offload
