#include "kiri/base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kiri/base/error.h"
#include "kiri/base/log.h"

namespace kiri {

namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Creates a fresh temporary file next to `path`. O_EXCL with a per-process
// counter makes the name unique even among threads; the mode 0666 lets the
// umask decide the final permissions, as for an ordinary file.
int create_temp(const std::string& path, std::string* temp) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    // *temp is set only once the file is ours: a caller's cleanup removes it.
    const std::string name =
        str(dir_of(path), "/.", base_of(path), ".tmp.", getpid(), ".", counter++);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *temp = name;
      return fd;
    }
    if (errno != EEXIST)
      KIRI_RAISE(kIo, "cannot create the temporary file ", name, ": ", std::strerror(errno));
  }
  KIRI_RAISE(kIo, "cannot create a temporary file beside it: 100 names taken");
}

void fsync_fd(int fd, const std::string& path) {
  fault_before_fsync(path);
  if (::fsync(fd) != 0) KIRI_RAISE(kIo, "fsync of ", path, " failed: ", std::strerror(errno));
}

}  // namespace

void FileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    // Linux caps one write at ~2 GiB; loop over partial writes and EINTR.
    const ssize_t n = ::write(fd_, p, bytes < (1u << 30) ? bytes : (1u << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      KIRI_RAISE(kIo, "write to ", path_, " failed after ", written_,
                 " bytes: ", n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    bytes -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void FileWriter::write_at(size_t offset, const void* data, size_t bytes) {
  KIRI_CHECK(offset <= written_ && bytes <= written_ - offset, "write_at [", offset, ", ",
             offset + bytes, ") of ", path_, " passes the ", written_, " bytes written");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      KIRI_RAISE(kIo, "write to ", path_, " at byte ", offset,
                 " failed: ", n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    offset += static_cast<size_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(bytes); });
}

void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill) {
  std::string temp;
  int fd = -1;
  try {
    fd = create_temp(path, &temp);
    FileWriter writer(fd, temp);
    fill(writer);
    fsync_fd(fd, temp);
    const int rc = ::close(fd);
    fd = -1;  // closed even when close reports an error
    if (rc != 0) KIRI_RAISE(kIo, "close of ", temp, " failed: ", std::strerror(errno));
    if (::rename(temp.c_str(), path.c_str()) != 0)
      KIRI_RAISE(kIo, "cannot rename ", temp, " to ", path, ": ", std::strerror(errno));
    temp.clear();  // renamed: nothing to remove
    fsync_path(dir_of(path));
  } catch (const Error& e) {
    if (fd >= 0) ::close(fd);
    if (!temp.empty()) ::unlink(temp.c_str());
    if (e.kind() != ErrorKind::kIo) throw;
    // The target first: the temporary file's name alone does not say which output failed.
    raise(ErrorKind::kIo, str("cannot write ", path, ": ", e.message()), __FILE__, __LINE__);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    if (!temp.empty()) ::unlink(temp.c_str());
    throw;
  }
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) KIRI_RAISE(kIo, "cannot open ", path, ": ", std::strerror(errno));
  std::string out;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      KIRI_RAISE(kIo, "read of ", path, " failed after ", out.size(),
                 " bytes: ", std::strerror(err));
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void fault_before_fsync(const std::string& path) {
  static std::atomic<long long> count{0};
  const char* spec = std::getenv("KIRI_FAULT");
  if (!spec || std::strncmp(spec, "fsync:", 6) != 0) return;
  int rank = -2;
  long long n = -1;
  if (std::sscanf(spec + 6, "%d:%lld", &rank, &n) != 2) return;
  const int mine = log::rank() < 0 ? 0 : log::rank();
  if (rank != mine || ++count != n) return;
  std::fprintf(stderr, "KIRI_FAULT: killing rank %d before fsync %lld (%s)\n", mine, n,
               path.c_str());
  std::raise(SIGKILL);
}

void fsync_path(const std::string& path) {
  fault_before_fsync(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) KIRI_RAISE(kIo, "cannot open ", path, " to fsync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) KIRI_RAISE(kIo, "fsync of ", path, " failed: ", std::strerror(err));
}

}  // namespace kiri
