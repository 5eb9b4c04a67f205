#pragma once
// Shared by the offload tests: a temporary folder removed afterwards, a small
// filesystem mounted for the test (a full disk, a filesystem without O_DIRECT), and
// page-aligned buffers of known bytes.
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "cli/run_kiri.h"

namespace kiri::testing {

// `type` (tmpfs, ramfs) mounted on a fresh folder; ok() is false, with why(), where
// this process may not mount (not root, or a container without CAP_SYS_ADMIN).
class ScopedMount {
 public:
  ScopedMount(const std::string& name, const char* type, const char* options) : dir_(name) {
    if (::mount(type, dir_.path().c_str(), type, 0, options) == 0)
      mounted_ = true;
    else
      why_ = std::string("mount -t ") + type + " failed: " + std::strerror(errno);
  }
  ~ScopedMount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// A 4 KiB-aligned buffer (O_DIRECT's rule).
class PageBuffer {
 public:
  explicit PageBuffer(int64_t bytes) : bytes_(bytes) {
    if (::posix_memalign(&p_, 4096, static_cast<size_t>(bytes)) != 0) p_ = nullptr;
    std::memset(p_, 0, static_cast<size_t>(bytes));
  }
  ~PageBuffer() { std::free(p_); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  int64_t bytes() const { return bytes_; }
  // Bytes that differ by position and seed, so a piece in the wrong place shows.
  void fill(uint32_t seed) {
    for (int64_t i = 0; i < bytes_; ++i)
      data()[i] = static_cast<unsigned char>((i * 2654435761u + seed * 40503u + (i >> 12)) >> 3);
  }

 private:
  void* p_ = nullptr;
  int64_t bytes_;
};

}  // namespace kiri::testing
