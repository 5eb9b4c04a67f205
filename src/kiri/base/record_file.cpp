#include "kiri/base/record_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <utility>

#include "kiri/base/error.h"
#include "kiri/base/log.h"

namespace kiri {

RecordFile::RecordFile(const std::string& path, bool append, std::string what)
    : path_(path), what_(std::move(what)) {
  if (path.empty()) return;
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the folder of the ", what_, " '", path,
                  "': ", ec.message());
  // O_NONBLOCK: a FIFO without a reader is an error (ENXIO) instead of a hang.
  fd_ = ::open(path.c_str(),
               O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0666);
  KIRI_CHECK_KIND(kIo, fd_ >= 0, "cannot open the ", what_, " '", path,
                  "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) size_ = st.st_size;
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);  // records are written whole
}

RecordFile::RecordFile(RecordFile&& o) noexcept
    : path_(std::move(o.path_)),
      what_(std::move(o.what_)),
      fd_(std::exchange(o.fd_, -1)),
      size_(o.size_),
      since_sync_(o.since_sync_) {}

RecordFile& RecordFile::operator=(RecordFile&& o) {
  if (this == &o) return *this;
  close();
  path_ = std::move(o.path_);
  what_ = std::move(o.what_);
  fd_ = std::exchange(o.fd_, -1);
  size_ = o.size_;
  since_sync_ = o.since_sync_;
  return *this;
}

RecordFile::~RecordFile() {
  try {
    close();
  } catch (const std::exception& e) {
    log::warn(e.what());
  }
}

void RecordFile::append(std::string_view record, int64_t step, bool sync_now) {
  if (fd_ < 0) return;
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "no progress";
      // Best effort: the partial record goes, so the file ends with a whole one (a resume
      // drops a torn last line anyway).
      if (done > 0 && ::ftruncate(fd_, size_) != 0)
        log::warn("cannot cut the partial record off ", path_, ": ", std::strerror(errno));
      KIRI_RAISE(kIo, "cannot write the ", what_, " '", path_, "' at step ", step, ": ", why, " (",
                 done, " of the record's ", record.size(),
                 " bytes written); the run stops rather than train without a record "
                 "(docs/metrics.md): make room, then continue with --resume auto");
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<int64_t>(record.size());
  if (sync_now || since_sync_.seconds() >= kSyncInterval) sync(step);
}

void RecordFile::sync(int64_t step) {
  // EINVAL: a pipe or a terminal (log.metrics=/dev/stdout), which has nothing to sync.
  if (::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS)
    KIRI_RAISE(kIo, "cannot write the ", what_, " '", path_, "' (sync after step ", step,
               "): ", std::strerror(errno), "; the run stops rather than train without a record",
               " (docs/metrics.md)");
  since_sync_.reset();
}

void RecordFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;  // closed even when the sync or the close reports an error
  const int sync_rc = ::fsync(fd);
  const int sync_err = errno;
  const int close_rc = ::close(fd);
  const int close_err = errno;
  if (sync_rc != 0 && sync_err != EINVAL && sync_err != EROFS)
    KIRI_RAISE(kIo, "cannot write the ", what_, " '", path_,
               "' (sync at close): ", std::strerror(sync_err));
  KIRI_CHECK_KIND(kIo, close_rc == 0, "cannot write the ", what_, " '", path_,
                  "' (close): ", std::strerror(close_err));
}

}  // namespace kiri
