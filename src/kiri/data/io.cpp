#include "kiri/data/io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiri/base/error.h"

namespace kiri::data {

std::string read_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    KIRI_RAISE(kData, what, " ", path, " does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) KIRI_RAISE(kData, "cannot open ", what, " ", path, ": ", std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), size);
  if (in.gcount() != size)
    KIRI_RAISE(kData, "read ", in.gcount(), " of ", size, " bytes of ", what, " ", path);
  return bytes;
}

namespace {

// Closes the descriptor on every path out, including a throw.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) KIRI_RAISE(kIo, "cannot write ", path, ": ", std::strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::initializer_list<std::string_view> parts) {
  // A name of its own per process and call: ranks or test processes that
  // prepare the same shards at once must not rename each other's file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = str(path, ".tmp.", ::getpid(), ".", counter++);
  try {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    if (f.fd < 0) KIRI_RAISE(kIo, "cannot create ", tmp, ": ", std::strerror(errno));
    for (std::string_view part : parts) write_all(f.fd, part, tmp);
    if (::fsync(f.fd) != 0) KIRI_RAISE(kIo, "cannot fsync ", tmp, ": ", std::strerror(errno));
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) KIRI_RAISE(kIo, "cannot close ", tmp, ": ", std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      KIRI_RAISE(kIo, "cannot rename ", tmp, " to ", path, ": ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());  // leave no half-written file behind
    throw;
  }
  // The rename itself is durable only once the directory is synced.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

}  // namespace kiri::data
