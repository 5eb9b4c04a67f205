#include "kiri/base/trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"

namespace kiri {
namespace {

using Interval = std::pair<int64_t, int64_t>;

// The length of the union of intervals (sorted in place).
int64_t union_length(std::vector<Interval>& v) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, end = INT64_MIN;
  for (const auto& [b, e] : v) {
    const int64_t from = std::max(b, end);
    if (e > from) total += e - from;
    end = std::max(end, e);
  }
  return total;
}

std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

Tracer::Tracer(int rank) : Tracer(rank, Clock::now()) {}

Tracer::Tracer(int rank, Clock::time_point epoch) : rank_(rank), epoch_(epoch) {}

int64_t Tracer::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - epoch_).count();
}

void Tracer::complete(std::string name, std::string category, int64_t start_us, int64_t dur_us,
                      std::string args_json, Lane lane) {
  if (!enabled()) return;
  Event e{std::move(name), std::move(category), std::move(args_json), start_us,
          std::max<int64_t>(dur_us, 0)};
  e.lane = lane;
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

void Tracer::counter(std::string name, int64_t ts_us, double value) {
  if (!enabled()) return;
  Event e{std::move(name), "counter", "", ts_us, 0, value};
  e.ph = 'C';
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

Tracer::Span::Span(Tracer* tracer, std::string_view name, std::string_view category, Lane lane)
    : tracer_(tracer && tracer->enabled() ? tracer : nullptr) {
  if (!tracer_) return;
  lane_ = lane;
  name_ = name;
  category_ = category;
  start_us_ = tracer_->now_us();
}

Tracer::Span::~Span() {
  if (!tracer_) return;
  const int64_t end = tracer_->now_us();
  tracer_->complete(std::move(name_), std::move(category_), start_us_, end - start_us_,
                    std::move(args_), lane_);
}

Tracer::BusyStats Tracer::busy(int64_t from_us, int64_t to_us) const {
  BusyStats s;
  if (to_us <= from_us) return s;
  std::vector<Interval> compute, both;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Event& e : events_) {
      if (e.ph != 'X' || (e.lane != Lane::kCompute && e.lane != Lane::kComm)) continue;
      const int64_t b = std::max(e.ts, from_us), en = std::min(e.ts + e.dur, to_us);
      if (en <= b) continue;
      both.emplace_back(b, en);
      if (e.lane == Lane::kCompute) compute.emplace_back(b, en);
    }
  }
  const int64_t c = union_length(compute), busy = union_length(both);
  s.span_us = static_cast<double>(to_us - from_us);
  s.compute_us = static_cast<double>(c);
  s.comm_us = static_cast<double>(busy - c);
  s.idle_us = static_cast<double>(to_us - from_us - busy);
  return s;
}

size_t Tracer::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

std::string Tracer::quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // UTF-8 passes through
        }
    }
  }
  out += '"';
  return out;
}

std::string Tracer::json() const {
  const std::string pid = std::to_string(rank_);
  std::string out = "{\"traceEvents\":[\n";
  // Metadata: the process is "rank N" (sorted by rank), the lanes are named.
  auto meta = [&](const char* what, int tid, const std::string& args) {
    out += str("{\"ph\":\"M\",\"name\":\"", what, "\",\"pid\":", pid, ",\"tid\":", tid,
               ",\"args\":{", args, "}},\n");
  };
  meta("process_name", 0, "\"name\":" + quote("rank " + pid));
  meta("process_sort_index", 0, "\"sort_index\":" + pid);
  meta("thread_name", 0, "\"name\":\"compute\"");
  meta("thread_name", 1, "\"name\":\"comm\"");
  meta("thread_name", 2, "\"name\":\"step\"");
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Event& e : events_) {
    out += "{\"ph\":\"";
    out += e.ph;
    out += "\",\"name\":" + quote(e.name) + ",\"cat\":" + quote(e.category) + ",\"pid\":" + pid +
           ",\"tid\":" + std::to_string(static_cast<int>(e.lane)) +
           ",\"ts\":" + std::to_string(e.ts);
    if (e.ph == 'X') {
      out += ",\"dur\":" + std::to_string(e.dur);
      if (!e.args.empty()) out += ",\"args\":" + e.args;
    } else {
      out += ",\"args\":{" + quote(e.name) + ":" + number(e.value) + "}";
    }
    out += "},\n";
  }
  out.resize(out.size() - 2);  // the last ",\n" (there are always metadata events)
  const auto epoch_us =
      std::chrono::duration_cast<std::chrono::microseconds>(epoch_.time_since_epoch()).count();
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"rank\":" + pid +
         ",\"clock\":\"steady_clock\",\"epoch_steady_us\":" + std::to_string(epoch_us) + "}}\n";
  return out;
}

void Tracer::write(const std::string& path) const {
  write_file_atomic(path, json());
}

}  // namespace kiri
