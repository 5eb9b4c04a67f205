#include "kiri/offload/async_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kiri/base/error.h"
#include "offload/offload_test_util.h"

namespace kiri::offload {

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions& options);  // async_io_uring.cpp

namespace {

using testing::PageBuffer;
using testing::TempDir;

constexpr int64_t kKiB = 1024;

// An O_DIRECT file (the swap files' mode) in its own folder.
struct DirectFile {
  TempDir dir;
  int fd = -1;
  explicit DirectFile(const std::string& name) : dir(name) {
    fd = ::open((dir.path() + "/f").c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  }
  ~DirectFile() {
    if (fd >= 0) ::close(fd);
  }
};

class AsyncIoTest : public ::testing::TestWithParam<kiri::IoEngine> {
 protected:
  // The engine under test, or nullptr after GTEST_SKIP where the kernel refuses io_uring.
  std::unique_ptr<AsyncIo> engine(int queue_depth, int64_t block) {
    IoOptions o;
    o.engine = GetParam();
    o.queue_depth = queue_depth;
    o.block_size = block;
    if (GetParam() == kiri::IoEngine::kIoUring && !make_io_uring(o)) return nullptr;
    auto io = make_async_io(o);
    EXPECT_STREQ(io->name(), kiri::name(GetParam()));
    return io;
  }
  std::string name() const { return kiri::name(GetParam()); }
};

#define ENGINE_OR_SKIP(var, qd, block)                                       \
  auto var = engine(qd, block);                                              \
  if (!var) GTEST_SKIP() << "this kernel refuses io_uring (io_uring_setup)"; \
  static_assert(true)

TEST_P(AsyncIoTest, RoundTripsMultiBlockRequestsAtOddQueueDepths) {
  DirectFile f("roundtrip_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  for (const int qd : {1, 3, 5, 7}) {
    ENGINE_OR_SKIP(io, qd, 8 * kKiB);
    // 37 pieces: 36 whole blocks and a last one of 4 KiB.
    const int64_t bytes = 36 * 8 * kKiB + 4 * kKiB;
    PageBuffer out(bytes), in(bytes);
    out.fill(static_cast<uint32_t>(qd));
    const int64_t at = 64 * kKiB * qd;
    const IoResult w = io->wait(io->write(f.fd, out.data(), bytes, at));
    EXPECT_EQ(w.err, 0) << std::strerror(w.err);
    EXPECT_EQ(w.done, bytes);
    EXPECT_EQ(w.bytes, bytes);
    EXPECT_TRUE(w.ok());
    const IoResult r = io->wait(io->read(f.fd, in.data(), bytes, at));
    EXPECT_TRUE(r.ok()) << "qd " << qd << ": err " << r.err << ", " << r.done << " of " << r.bytes;
    EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(bytes)), 0) << "qd " << qd;
  }
}

TEST_P(AsyncIoTest, RequestLargerThanQueueDepthTimesBlock) {
  DirectFile f("large_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  ENGINE_OR_SKIP(io, 2, 4 * kKiB);
  const int64_t bytes = 3 * 1024 * kKiB;  // 768 pieces through 2 slots
  PageBuffer out(bytes), in(bytes);
  out.fill(7);
  const auto wt = io->write(f.fd, out.data(), bytes, 0);
  const IoResult w = io->wait(wt);
  ASSERT_TRUE(w.ok()) << w.err << " " << w.done;
  const IoResult r = io->wait(io->read(f.fd, in.data(), bytes, 0));
  ASSERT_TRUE(r.ok()) << r.err << " " << r.done;
  EXPECT_EQ(r.done, bytes);
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(bytes)), 0);
}

TEST_P(AsyncIoTest, ShortReadAtEndOfFileIsReported) {
  DirectFile f("short_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  ENGINE_OR_SKIP(io, 3, 4 * kKiB);
  PageBuffer out(12 * kKiB), in(20 * kKiB);
  out.fill(3);
  ASSERT_TRUE(io->wait(io->write(f.fd, out.data(), 12 * kKiB, 0)).ok());
  // 5 blocks asked, 3 in the file: no error, 12 KiB done of 20.
  const IoResult r = io->wait(io->read(f.fd, in.data(), 20 * kKiB, 0));
  EXPECT_EQ(r.err, 0);
  EXPECT_EQ(r.done, 12 * kKiB);
  EXPECT_EQ(r.bytes, 20 * kKiB);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(12 * kKiB)), 0);
  // Wholly past the end: nothing done.
  const IoResult past = io->wait(io->read(f.fd, in.data(), 8 * kKiB, 64 * kKiB));
  EXPECT_EQ(past.err, 0);
  EXPECT_EQ(past.done, 0);
  EXPECT_FALSE(past.ok());
}

TEST_P(AsyncIoTest, BadDescriptorIsAnError) {
  ENGINE_OR_SKIP(io, 4, 4 * kKiB);
  PageBuffer buf(16 * kKiB);
  const IoResult r = io->wait(io->read(-1, buf.data(), 16 * kKiB, 0));
  EXPECT_EQ(r.err, EBADF) << std::strerror(r.err);
  EXPECT_EQ(r.done, 0);
  EXPECT_FALSE(r.ok());
  // Writing through a read-only descriptor.
  TempDir dir("badfd_" + name());
  const std::string path = dir.path() + "/ro";
  ::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0600));
  const int ro = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  const IoResult w = io->wait(io->write(ro, buf.data(), 16 * kKiB, 0));
  ::close(ro);
  EXPECT_EQ(w.err, EBADF) << std::strerror(w.err);
  EXPECT_FALSE(w.ok());
  // The engine still works after the errors.
  DirectFile f("badfd_after_" + name());
  EXPECT_TRUE(io->wait(io->write(f.fd, buf.data(), 16 * kKiB, 0)).ok());
}

TEST_P(AsyncIoTest, ManyTicketsWaitedOutOfOrder) {
  DirectFile f("tickets_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  ENGINE_OR_SKIP(io, 5, 8 * kKiB);
  constexpr int kRequests = 64;
  std::mt19937 rng(14);
  std::vector<int64_t> size(kRequests), at(kRequests);
  int64_t total = 0;
  for (int i = 0; i < kRequests; ++i) {
    size[i] = 4 * kKiB * (1 + static_cast<int64_t>(rng() % 9));  // 4 to 36 KiB
    at[i] = total;
    total += size[i];
  }
  PageBuffer out(total), in(total);
  out.fill(11);
  std::vector<AsyncIo::Ticket> tickets(kRequests);
  for (int i = 0; i < kRequests; ++i)
    tickets[i] = io->write(f.fd, out.data() + at[i], size[i], at[i]);
  std::vector<int> order(kRequests);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) {
    const IoResult r = io->wait(tickets[i]);
    EXPECT_TRUE(r.ok()) << "write " << i << ": " << r.err;
    EXPECT_EQ(r.bytes, size[i]);
  }
  for (int i = 0; i < kRequests; ++i)
    tickets[i] = io->read(f.fd, in.data() + at[i], size[i], at[i]);
  for (int i = kRequests; i-- > 0;) EXPECT_EQ(io->wait(tickets[i]).done, size[i]) << "read " << i;
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(total)), 0);
  // A ticket is waited for once.
  try {
    io->wait(tickets[0]);
    ADD_FAILURE() << "a second wait on a ticket returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("already waited"), std::string::npos) << e.message();
  }
}

// The swapper reads the next chunk while it updates this one, and a chunk is many
// times queue_depth x block_size: the engine must finish a request without the
// caller's thread calling into it. The last block reaches the disk before wait().
TEST_P(AsyncIoTest, RequestCompletesWithoutTheCallerWaiting) {
  DirectFile f("progress_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  ENGINE_OR_SKIP(io, 2, 4 * kKiB);
  const int64_t bytes = 2 * 1024 * kKiB;  // 512 pieces through 2 slots
  PageBuffer out(bytes), last(4 * kKiB);
  out.fill(12);
  const auto ticket = io->write(f.fd, out.data(), bytes, 0);
  const int probe = ::open((f.dir.path() + "/f").c_str(), O_RDONLY | O_DIRECT);
  ASSERT_GE(probe, 0);
  bool landed = false;
  for (int i = 0; i < 1000 && !landed; ++i) {  // up to 10 s
    ::usleep(10000);
    landed = ::pread(probe, last.data(), 4 * kKiB, bytes - 4 * kKiB) == 4 * kKiB &&
             std::memcmp(last.data(), out.data() + bytes - 4 * kKiB, 4 * kKiB) == 0;
  }
  ::close(probe);
  EXPECT_TRUE(landed) << "the last piece of the request was not written before wait()";
  EXPECT_TRUE(io->wait(ticket).ok());
}

TEST_P(AsyncIoTest, DestructionWaitsForTransfersInFlight) {
  DirectFile f("drain_" + name());
  ASSERT_GE(f.fd, 0) << std::strerror(errno);
  const int64_t bytes = 4 * 1024 * kKiB;
  PageBuffer out(bytes), in(bytes);
  out.fill(5);
  {
    ENGINE_OR_SKIP(io, 2, 64 * kKiB);
    io->write(f.fd, out.data(), bytes, 0);  // never waited for: the destructor drains it
  }
  ENGINE_OR_SKIP(io, 8, 1024 * kKiB);
  ASSERT_TRUE(io->wait(io->read(f.fd, in.data(), bytes, 0)).ok());
  EXPECT_EQ(std::memcmp(out.data(), in.data(), static_cast<size_t>(bytes)), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, AsyncIoTest,
                         ::testing::Values(kiri::IoEngine::kThreads, kiri::IoEngine::kIoUring),
                         [](const auto& info) {
                           return std::string(info.param == kiri::IoEngine::kThreads ? "threads"
                                                                                     : "io_uring");
                         });

void expect_config_error(const IoOptions& o, const std::string& text) {
  try {
    make_async_io(o);
    ADD_FAILURE() << "no error for " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find(text), std::string::npos) << e.message();
  }
}

TEST(AsyncIo, RejectsBadQueueDepthAndBlockSize) {
  IoOptions o;
  o.queue_depth = 0;
  expect_config_error(o, "offload.queue_depth must be in [1, 1024], got 0");
  o.queue_depth = 100000;
  expect_config_error(o, "got 100000");
  o.queue_depth = 8;
  o.block_size = 1000;
  expect_config_error(o, "offload.block_size must be a multiple of 4 KiB up to 1 GiB, got 1000");
  o.block_size = int64_t{2} << 30;
  expect_config_error(o, "got 2147483648");
}

// Runs `body` in a child process whose io_uring_setup fails with ENOSYS, as under a
// container's seccomp profile (Docker's default blocks io_uring); the exit code is
// body's result.
int under_seccomp_without_io_uring(int (*body)()) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      ::_exit(100);
    ::_exit(body());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

TEST(AsyncIo, AutoIsTheThreadPool) {
  // The measured default (docs/performance.md), where io_uring works too.
  EXPECT_STREQ(make_async_io(IoOptions{})->name(), "threads");
}

TEST(AsyncIo, IoUringRefusedIsNullptrAndANamedErrorWhenAskedFor) {
  const int autoed = under_seccomp_without_io_uring([] {
    IoOptions o;
    if (make_io_uring(o) != nullptr) return 1;
    return std::strcmp(make_async_io(o)->name(), "threads") == 0 ? 0 : 2;
  });
  if (autoed == 100) GTEST_SKIP() << "seccomp filters are not permitted here";
  EXPECT_EQ(autoed, 0) << "1: io_uring initialised under the filter, 2: auto is not threads";
  const int forced = under_seccomp_without_io_uring([] {
    IoOptions o;
    o.engine = kiri::IoEngine::kIoUring;
    try {
      make_async_io(o);
    } catch (const Error& e) {
      const bool named = e.message().find("refuses io_uring") != std::string::npos &&
                         e.message().find("offload.engine = threads") != std::string::npos;
      return e.kind() == ErrorKind::kConfig && named ? 0 : 3;
    }
    return 4;
  });
  EXPECT_EQ(forced, 0) << "3: the wrong error, 4: no error for engine = io_uring";
}

}  // namespace
}  // namespace kiri::offload
