#pragma once
// A file that a run appends records to as it goes (metrics.jsonl, metrics.csv, TensorBoard's
// event file), with every write checked: a record that cannot be written in full (a full
// disk, a quota, an I/O error) is a kIo error naming the file, the step and the reason, and
// the partial record is cut off again where the file allows it, so the run stops rather than
// train without a record (docs/metrics.md). Records go straight to the kernel (no user-space
// buffer); a record asked to, and one at least every kSyncInterval seconds, is also synced
// to disk, so that filesystems which report errors only then (NFS) fail too.
#include <cstdint>
#include <string>
#include <string_view>

#include "kiri/base/timer.h"

namespace kiri {

class RecordFile {
 public:
  static constexpr double kSyncInterval = 60;
  RecordFile() = default;
  // Opens `path` (creating its folder) to append, or truncated when !append; "" is a
  // disabled file that ignores records. `what` names it in errors ("metrics file").
  RecordFile(const std::string& path, bool append, std::string what);
  ~RecordFile();  // closes; an error then can only be a warning
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;
  RecordFile(RecordFile&& o) noexcept;
  // Closes this file first (kIo as close()), then takes o's.
  RecordFile& operator=(RecordFile&& o);

  // Writes `record` whole (kIo naming `step` otherwise); syncs when `sync` or when the last
  // sync is kSyncInterval seconds old.
  void append(std::string_view record, int64_t step, bool sync);
  // Syncs and closes the file, kIo on failure; the destructor does it otherwise.
  void close();
  bool enabled() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

 private:
  void sync(int64_t step);
  std::string path_, what_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes in the file: where a failed record is cut off
  Timer since_sync_;
};

}  // namespace kiri
