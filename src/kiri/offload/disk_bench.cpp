#include "kiri/offload/disk_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"
#include "kiri/base/units.h"

namespace kiri::offload {

namespace {

constexpr int64_t kPage = 4096;

// The scratch file: closed and removed however the measurement ends.
struct Scratch {
  std::string path;
  int fd = -1;
  ~Scratch() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

struct Aligned {
  void* p = nullptr;
  explicit Aligned(int64_t bytes) {
    if (::posix_memalign(&p, kPage, static_cast<size_t>(bytes)) != 0) p = nullptr;
  }
  ~Aligned() { std::free(p); }
};

[[noreturn]] void fail(const std::string& dir, const char* what, int err) {
  KIRI_RAISE(kIo, "cannot measure the disk under ", dir, ": ", what, ": ", std::strerror(err),
             err == ENOSPC ? " (the disk is full: free space or measure a smaller size)" : "");
}

// Opens a fresh scratch file under dir, O_DIRECT when the filesystem takes it.
void open_scratch(const std::string& dir, Scratch& s, bool& direct) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail(dir, "the folder", errno);
  if (!S_ISDIR(st.st_mode)) fail(dir, "the folder", ENOTDIR);
  std::random_device rd;
  s.path = str(dir, "/.kiri-disk-bench-", ::getpid(), "-", rd());
  s.fd = ::open(s.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  direct = true;
  if (s.fd < 0 && errno == EINVAL) {
    // No O_DIRECT (ramfs, some FUSE): buffered, the page cache dropped before reading.
    // The failed open may have created the file already, so no O_EXCL here.
    direct = false;
    s.fd = ::open(s.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  if (s.fd < 0) {
    const int err = errno;
    if (err != EEXIST) ::unlink(s.path.c_str());
    s.path.clear();
    fail(dir, "a scratch file", err);
  }
}

// One pass over the file: requests of one block each, up to `slots` of them
// outstanding (each into its own slot of buf: reads into one buffer at once would race),
// so the engine has the next piece queued when one completes.
void pass(AsyncIo& io, const Scratch& s, char* buf, int slots, int64_t stride, int64_t bytes,
          int64_t block, bool write, const std::string& dir) {
  std::deque<std::pair<AsyncIo::Ticket, int64_t>> out;  // ticket, offset
  auto reap = [&] {
    const auto [ticket, at] = out.front();
    out.pop_front();
    const IoResult r = io.wait(ticket);
    if (r.err != 0)
      fail(dir, write ? "writing the scratch file" : "reading the scratch file", r.err);
    if (r.done != r.bytes)
      KIRI_RAISE(kIo, "cannot measure the disk under ", dir, ": ", write ? "a write" : "a read",
                 " at offset ", at, " moved ", r.done, " of ", r.bytes, " bytes");
  };
  int64_t i = 0;
  for (int64_t at = 0; at < bytes; at += block, ++i) {
    if (static_cast<int64_t>(out.size()) >= slots) reap();
    const int64_t n = std::min(block, bytes - at);
    char* slot = buf + (i % slots) * stride;
    out.emplace_back(write ? io.write(s.fd, slot, n, at) : io.read(s.fd, slot, n, at), at);
  }
  while (!out.empty()) reap();
}

}  // namespace

DiskBandwidth measure_disk_bandwidth(const std::string& dir, int64_t bytes,
                                     const IoOptions& options) {
  KIRI_CHECK_KIND(kConfig, bytes > 0, "the disk measurement needs bytes > 0, got ", bytes);
  std::unique_ptr<AsyncIo> io = make_async_io(options);  // checks block size and depth
  const int64_t block = options.block_size;
  bytes = (bytes + kPage - 1) / kPage * kPage;
  Scratch s;
  DiskBandwidth bw;
  bw.engine = io->name();
  open_scratch(dir, s, bw.direct);
  // Reserved first, as the swap files are: a full disk fails here, and the write
  // pass measures writes into allocated space, as every step's writes are.
  if (const int err = ::posix_fallocate(s.fd, 0, bytes); err != 0)
    fail(dir, str("reserving ", format_bytes(bytes), " for a scratch file").c_str(), err);
  // 2 x queue_depth requests outstanding, within 128 MiB of buffers but never fewer
  // than queue_depth + 1 (the engine's queue_depth in flight and the next one queued).
  const int depth = options.queue_depth;
  const int64_t cap = std::max<int64_t>(depth + 1, (int64_t{128} << 20) / block);
  const int slots = static_cast<int>(std::min<int64_t>(2 * depth, cap));
  const int64_t stride = std::min(block, bytes);
  const int64_t buf_bytes = slots * stride;
  Aligned buf(buf_bytes);
  if (buf.p == nullptr) fail(dir, "a staging buffer", ENOMEM);
  std::mt19937_64 rng(0x6b697269);  // incompressible data, as optimizer states are
  for (int64_t i = 0; i < buf_bytes / 8; ++i) static_cast<uint64_t*>(buf.p)[i] = rng();
  char* b = static_cast<char*>(buf.p);

  // A first, untimed pass writes the reserved (unwritten) extents: every step rewrites
  // blocks written before (StateStore writes zeros at creation), and on ext4 a write
  // into unwritten extents costs more (the extents are converted as it completes).
  pass(*io, s, b, slots, stride, bytes, block, true, dir);
  if (::fdatasync(s.fd) != 0) fail(dir, "fdatasync of the scratch file", errno);
  Timer write_timer;
  pass(*io, s, b, slots, stride, bytes, block, true, dir);
  if (::fdatasync(s.fd) != 0) fail(dir, "fdatasync of the scratch file", errno);
  const double write_s = write_timer.seconds();
  // Nothing of the file may be read from memory (the buffered fallback relies on it).
  ::posix_fadvise(s.fd, 0, 0, POSIX_FADV_DONTNEED);
  Timer read_timer;
  pass(*io, s, b, slots, stride, bytes, block, false, dir);
  const double read_s = read_timer.seconds();
  bw.write_bytes_per_s = static_cast<double>(bytes) / write_s;
  bw.read_bytes_per_s = static_cast<double>(bytes) / read_s;
  return bw;
}

}  // namespace kiri::offload
