#include "kiri/tensorboard/event_file.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <filesystem>

#include "kiri/base/crc32c.h"
#include "kiri/base/error.h"
#include "kiri/tensorboard/event.pb.h"

namespace kiri::tensorboard {

namespace {
constexpr uint32_t kMaskDelta = 0xa282ead8u;
std::atomic<int64_t> files_opened{0};  // by this process: the last number of a file's name

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string serialized(const ::tensorflow::Event& e) {
  std::string s;
  KIRI_CHECK_KIND(kInternal, e.SerializeToString(&s), "cannot serialize a TensorBoard event");
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}
}  // namespace

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

std::string event_file_name(int64_t wall_secs, const std::string& host, int64_t pid, int64_t n) {
  return "events.out.tfevents." + std::to_string(wall_secs) + "." + host + "." +
         std::to_string(pid) + "." + std::to_string(n);
}

EventFile::EventFile(const std::string& dir)
    : start_(now_seconds()),
      file_((std::filesystem::path(dir) /
             event_file_name(static_cast<int64_t>(start_), hostname(), ::getpid(), files_opened++))
                .string(),
            /*append=*/false, "TensorBoard event file") {
  ::tensorflow::Event e;
  e.set_wall_time(start_);
  e.set_file_version("brain.Event:2");
  file_.append(tfrecord(serialized(e)), 0, /*sync=*/false);
}

void EventFile::start_session(int64_t step) {
  ::tensorflow::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  e.mutable_session_log()->set_status(::tensorflow::SessionLog::START);
  file_.append(tfrecord(serialized(e)), step, /*sync=*/false);
}

void EventFile::add_scalars(int64_t step, double wall_time, const std::vector<Scalar>& scalars,
                            bool sync) {
  ::tensorflow::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  ::tensorflow::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    ::tensorflow::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  file_.append(tfrecord(serialized(e)), step, sync);
}

}  // namespace kiri::tensorboard
