#pragma once
// TensorBoard event files (events.out.tfevents.<secs>.<host>.<pid>.<n>): a sequence of
// TFRecord records, each a `tensorflow.Event` protocol buffer (event.proto here, TensorFlow's
// field numbers). TFRecord frames a record as
//   uint64 length (little-endian), uint32 masked crc32c of those 8 bytes,
//   the data, uint32 masked crc32c of the data,
// with TensorFlow's mask ((crc >> 15 | crc << 17) + 0xa282ead8). The first record carries
// file_version "brain.Event:2"; each step's scalars follow as one Event of simple_values.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiri/base/record_file.h"

namespace kiri::tensorboard {

// TensorFlow's masked CRC-32C (the checksum of a record's length and of its data).
uint32_t masked_crc32c(std::string_view bytes);
// One TFRecord: `data` framed as above.
std::string tfrecord(std::string_view data);
// events.out.tfevents.<wall_secs>.<host>.<pid>.<n>, as PyTorch's SummaryWriter names it: n
// counts the files this process opened (0 first), so that two in one second do not collide.
std::string event_file_name(int64_t wall_secs, const std::string& host, int64_t pid, int64_t n);

// A scalar of a step: its tag ("loss", "mem/params") and value (written as float32, as
// TensorBoard stores simple_value).
using Scalar = std::pair<std::string, double>;

// Writes one event file in `dir` (created), a new one per writer: a resumed run adds a file
// beside the earlier ones, and TensorBoard reads them in name order. Each record is written
// whole and checked (RecordFile): a failure is a kIo error naming the file and the step.
class EventFile {
 public:
  explicit EventFile(const std::string& dir);
  // One Event at `step` holding every scalar; `wall_time` in seconds since the epoch.
  void add_scalars(int64_t step, double wall_time, const std::vector<Scalar>& scalars, bool sync);
  // A resumed run's first step: a SessionLog START event, at which TensorBoard drops the
  // events of `step` and later that it read before (an earlier, longer attempt's).
  void start_session(int64_t step);
  void close() { file_.close(); }
  const std::string& path() const { return file_.path(); }

 private:
  double start_;  // wall time of the file's first record, in its name
  RecordFile file_;
};

}  // namespace kiri::tensorboard
