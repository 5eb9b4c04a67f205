#pragma once
// Crash-safe file writes. A reader of `path` sees either the old file or the
// complete new one, never a partial write: the bytes go to a temporary file in
// the same directory (so the rename stays on one filesystem), which is
// fsynced, renamed over the target, and then the directory is fsynced so the
// rename itself survives a power cut.
//
// Every failure (missing directory, permission, ENOSPC, a short write) is a
// kIo error naming the path and strerror; the temporary file is removed
// before the error propagates, also when the writer callback throws.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace kiri {

// Sequential writer over an open file descriptor, handed to the callback of
// write_file_atomic. Writes go straight to the kernel (no buffering), so large
// tensors are not copied.
class FileWriter {
 public:
  FileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites bytes already written at `offset` (a header whose checksums are known only
  // once the data after it is written); offset + bytes must not pass written().
  void write_at(size_t offset, const void* data, size_t bytes);
  size_t written() const { return written_; }

 private:
  int fd_;
  std::string path_;  // the temporary file, for messages
  size_t written_ = 0;
};

void write_file_atomic(const std::string& path, std::string_view bytes);
void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill);

// The whole file; kIo error naming the path when it cannot be read.
std::string read_file(const std::string& path);

// fsync of a file or a directory by path (directories make renames and
// creations in them durable).
void fsync_path(const std::string& path);

// The tests' crash points (KIRI_FAULT=fsync:RANK:N, docs in train/faults.h): every fsync
// here first counts itself, and the process of log rank RANK (0 also for a single process)
// dies by SIGKILL just before its Nth one. No-op unless KIRI_FAULT asks for it.
void fault_before_fsync(const std::string& path);

}  // namespace kiri
