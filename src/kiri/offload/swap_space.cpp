#include "kiri/offload/swap_space.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "kiri/base/error.h"
#include "kiri/base/log.h"
#include "kiri/base/units.h"

namespace kiri::offload {

namespace fs = std::filesystem;

namespace {
constexpr int64_t kPage = 4096;
int64_t round_page(int64_t b) {
  return (b + kPage - 1) / kPage * kPage;
}
// Checksum of a block never written: reading it is an error, not zeros.
constexpr uint64_t kNeverWritten = 0;
uint64_t block_sum(const void* p, int64_t n) {
  const uint64_t h = XXH3_64bits(p, static_cast<size_t>(n));
  return h == kNeverWritten ? 1 : h;
}
}  // namespace

struct SwapSpace::File {
  std::string path;
  int fd = -1;
  int64_t bytes = 0;  // logical size
  Category category = Category::kOther;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<uint64_t> sums;  // per block; kNeverWritten until written
};

struct SwapSpace::Pending {
  AsyncIo::Ticket io = 0;
  int file = -1;
  int64_t offset = 0, bytes = 0;
  const void* buf = nullptr;
  bool write = false;
  bool live = false;
};

SwapSpace::SwapSpace(const SwapOptions& options, Allocator& accounting)
    : options_(options), accounting_(accounting) {
  KIRI_CHECK_KIND(kConfig, !options.dir.empty(), "offload.path must not be empty");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the offload folder ", options.dir, ": ", ec.message());
  const std::string lock = options.dir + "/.lock";
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  KIRI_CHECK_KIND(kIo, lock_fd_ >= 0, "cannot open ", lock, ": ", std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    KIRI_RAISE(kConfig, "the offload folder ", options.dir, " is in use by another run (",
               err == EWOULDBLOCK ? "its lock is held" : std::strerror(err),
               "): give this run its own offload.path");
  }
  io_ = make_async_io(options.io);
}

SwapSpace::~SwapSpace() {
  for (auto& p : pending_)
    if (p && p->live) io_->wait(p->io);  // no transfer may outlive its buffer's owner
  for (auto& f : files_) {
    accounting_.add_tier_bytes(Tier::kNvme, f->category, -f->bytes);
    ::close(f->fd);
    if (!keep_) ::unlink(f->path.c_str());
  }
  if (!keep_) {
    ::unlink((options_.dir + "/.lock").c_str());
    std::error_code ec;
    fs::remove(options_.dir, ec);  // only when empty
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

int SwapSpace::create(const std::string& name, int64_t bytes, Category category) {
  KIRI_CHECK(bytes > 0 && name.find('/') == std::string::npos, "swap file '", name, "' of ", bytes,
             " bytes");
  auto f = std::make_unique<File>();
  f->path = options_.dir + "/" + name;
  f->bytes = bytes;
  f->category = category;
  int fd = ::open(f->path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EINVAL) {  // tmpfs and others: no O_DIRECT
    fd = ::open(f->path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0 && direct_)
      log::warn("offload: ", options_.dir,
                " does not take O_DIRECT: the swap files go through the page cache");
    direct_ = false;
  }
  KIRI_CHECK_KIND(kIo, fd >= 0, "cannot create the swap file ", f->path, ": ",
                  std::strerror(errno));
  f->fd = fd;
  const int64_t disk = round_page(bytes);
  if (::ftruncate(fd, 0) != 0 || ::ftruncate(fd, disk) != 0 ||
      (errno = ::posix_fallocate(fd, 0, disk)) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(f->path.c_str());
    KIRI_RAISE(kIo, "cannot reserve ", format_bytes(disk), " for the swap file ", f->path, ": ",
               std::strerror(err),
               err == ENOSPC ? " (the disk of offload.path is full: free space or point "
                               "offload.path at a larger disk)"
                             : "");
  }
  struct stat st {};
  ::fstat(fd, &st);
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->sums.assign(static_cast<size_t>((bytes + block_size() - 1) / block_size()), kNeverWritten);
  accounting_.add_tier_bytes(Tier::kNvme, category, bytes);
  files_.push_back(std::move(f));
  return static_cast<int>(files_.size()) - 1;
}

const std::string& SwapSpace::path(int file) const {
  return files_.at(static_cast<size_t>(file))->path;
}
int64_t SwapSpace::size(int file) const {
  return files_.at(static_cast<size_t>(file))->bytes;
}

namespace {
void check_range(const std::string& path, int64_t file_bytes, int64_t block, int64_t offset,
                 int64_t bytes, const void* buf) {
  KIRI_CHECK(offset >= 0 && offset % block == 0 && bytes > 0 && offset + bytes <= file_bytes &&
                 (bytes % block == 0 || offset + bytes == file_bytes) &&
                 reinterpret_cast<uintptr_t>(buf) % kPage == 0,
             "swap transfer of ", bytes, " bytes at ", offset, " of ", path, " (", file_bytes,
             " bytes, blocks of ", block, ") is not block-aligned");
}
}  // namespace

SwapSpace::Ticket SwapSpace::read(int file, int64_t offset, void* buf, int64_t bytes) {
  File& f = *files_.at(static_cast<size_t>(file));
  check_range(f.path, f.bytes, block_size(), offset, bytes, buf);
  auto p = std::make_unique<Pending>();
  *p = {io_->read(f.fd, buf, round_page(bytes), offset), file, offset, bytes, buf, false, true};
  pending_.push_back(std::move(p));
  return pending_.size() - 1;
}

SwapSpace::Ticket SwapSpace::write(int file, int64_t offset, const void* buf, int64_t bytes) {
  File& f = *files_.at(static_cast<size_t>(file));
  check_range(f.path, f.bytes, block_size(), offset, bytes, buf);
  const int64_t block = block_size();
  for (int64_t at = 0; at < bytes; at += block)
    f.sums[static_cast<size_t>((offset + at) / block)] =
        block_sum(static_cast<const char*>(buf) + at, std::min(block, bytes - at));
  auto p = std::make_unique<Pending>();
  *p = {io_->write(f.fd, buf, round_page(bytes), offset), file, offset, bytes, buf, true, true};
  pending_.push_back(std::move(p));
  return pending_.size() - 1;
}

bool SwapSpace::ready(Ticket ticket) const {
  KIRI_CHECK(ticket < pending_.size() && pending_[ticket] && pending_[ticket]->live, "swap ticket ",
             ticket, " is unknown or already waited for");
  return io_->ready(pending_[ticket]->io);
}

void SwapSpace::wait(Ticket ticket) {
  KIRI_CHECK(ticket < pending_.size() && pending_[ticket] && pending_[ticket]->live, "swap ticket ",
             ticket, " is unknown or already waited for");
  Pending p = *pending_[ticket];
  pending_[ticket]->live = false;
  while (!pending_.empty() && (!pending_.back() || !pending_.back()->live)) pending_.pop_back();
  const auto t0 = std::chrono::steady_clock::now();
  const IoResult r = io_->wait(p.io);
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  File& f = *files_[static_cast<size_t>(p.file)];
  const char* what = p.write ? "write" : "read";
  if (r.err != 0)
    KIRI_RAISE(kIo, "swap ", what, " of ", format_bytes(p.bytes), " at offset ", p.offset, " of ",
               f.path, " failed: ", std::strerror(r.err),
               r.err == ENOSPC ? " (the disk of offload.path is full)" : "");
  if (r.done < std::min(r.bytes, f.bytes - p.offset))
    KIRI_RAISE(kIo, "swap ", what, " of ", f.path, " at offset ", p.offset, " moved ", r.done,
               " of ", p.bytes, " bytes: the file was truncated (", f.path,
               " must not change while the run uses it)");
  if (p.write) {
    bytes_written_ += p.bytes;
    return;
  }
  bytes_read_ += p.bytes;
  const int64_t block = block_size();
  for (int64_t at = 0; at < p.bytes; at += block) {
    const size_t b = static_cast<size_t>((p.offset + at) / block);
    if (f.sums[b] == kNeverWritten)
      KIRI_RAISE(kInternal, "swap block ", b, " of ", f.path, " is read before it was written");
    if (block_sum(static_cast<const char*>(p.buf) + at, std::min(block, p.bytes - at)) != f.sums[b])
      KIRI_RAISE(kIo, "swap file ", f.path, ": block ", b, " (bytes ", p.offset + at, " to ",
                 p.offset + at + std::min(block, p.bytes - at),
                 ") does not match the checksum it was written with: the file was changed or "
                 "the disk returned bad data; resume from the last checkpoint");
  }
}

void SwapSpace::check_files() const {
  for (const auto& f : files_) {
    struct stat st {};
    if (::stat(f->path.c_str(), &st) != 0 || st.st_dev != f->dev || st.st_ino != f->ino)
      KIRI_RAISE(kIo, "the swap file ", f->path,
                 " was deleted or replaced while the run used it; resume from the last "
                 "checkpoint");
    if (st.st_size < f->bytes)
      KIRI_RAISE(kIo, "the swap file ", f->path, " was truncated to ", st.st_size, " of ", f->bytes,
                 " bytes while the run used it; resume from the last checkpoint");
  }
}

AlignedBuffer::AlignedBuffer(int64_t bytes, Category category, Allocator& allocator)
    : bytes_(round_page(bytes)), category_(category), core_(allocator.core()) {
  data_ = core_->allocate(static_cast<size_t>(bytes_), category);
  KIRI_CHECK(reinterpret_cast<uintptr_t>(data_) % kPage == 0, "staging buffer not page-aligned");
}
AlignedBuffer::~AlignedBuffer() {
  if (data_) core_->deallocate(data_, static_cast<size_t>(bytes_), category_);
}
AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(o.data_), bytes_(o.bytes_), category_(o.category_), core_(std::move(o.core_)) {
  o.data_ = nullptr;
}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) core_->deallocate(data_, static_cast<size_t>(bytes_), category_);
    data_ = o.data_;
    bytes_ = o.bytes_;
    category_ = o.category_;
    core_ = std::move(o.core_);
    o.data_ = nullptr;
  }
  return *this;
}

}  // namespace kiri::offload
