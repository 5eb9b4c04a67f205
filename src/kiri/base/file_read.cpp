#include "kiri/base/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiri {

namespace {

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, ErrorKind kind, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    raise(ErrorKind::kIo, str("cannot open ", what, " ", path, ": ", std::strerror(errno)),
          __FILE__, __LINE__);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    raise(ErrorKind::kIo, str("cannot stat ", what, " ", path, ": ", std::strerror(e)), __FILE__,
          __LINE__);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    raise(kind, str(what, " ", path, " is ", file_type(st.st_mode), ", not a regular file"),
          __FILE__, __LINE__);
  }
  // Regular files never block; reads go on as usual without O_NONBLOCK.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_small_file(const std::string& path, uint64_t max_bytes, ErrorKind kind,
                            const std::string& what) {
  const int fd = open_regular_file(path, kind, what);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  ::fstat(fd, &st);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    raise(kind, str(what, " ", path, " is ", size, " bytes, more than the ", max_bytes, " allowed"),
          __FILE__, __LINE__);
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t r = ::read(fd, out.data() + done, size - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      raise(ErrorKind::kIo, str("read of ", what, " ", path, " failed: ", std::strerror(errno)),
            __FILE__, __LINE__);
    if (r == 0) break;  // shrank while read: parse what is there, the parser judges it
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

std::string quote_bounded(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return str(text.substr(0, max_chars), "... (", text.size(), " characters)");
}

int json_nesting_depth(std::string_view text, int stop_at) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest >= stop_at) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace kiri
