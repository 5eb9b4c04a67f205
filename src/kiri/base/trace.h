#pragma once
// A per-rank timeline in Chrome's Trace Event Format (docs/trace.md): the
// JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open. Spans are
// "ph":"X" (complete) events with pid = the rank and tid = a lane, so that a
// rank shows as one process with a compute row and a communication row; the
// gaps between them are idle time (pipeline bubbles, waiting on a peer).
//
// No global state: a Tracer is an object the owner passes explicitly (the
// trainer to its model, the communicators via Communicator::set_tracer). One
// Tracer per rank; a rank records from its own thread. Recording is locked,
// so other threads of the rank may record too.
//
// Clock: std::chrono::steady_clock, in microseconds since the tracer's epoch.
// steady_clock is one clock for every thread and process of a host, so
// tracers given the same epoch line up exactly. Tracer(rank) takes its
// construction time as the epoch: ranks on different hosts (whose steady
// clocks are unrelated) are aligned at construction, so build the tracers
// right after a barrier and they agree to within the barrier's skew.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kiri {

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;
  // The tid of an event. busy() counts kCompute and kComm; kStep is for spans
  // that enclose others (a whole step, a microbatch), which busy() ignores.
  enum class Lane : int { kCompute = 0, kComm = 1, kStep = 2 };

  explicit Tracer(int rank);
  Tracer(int rank, Clock::time_point epoch);
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  int rank() const { return rank_; }
  Clock::time_point epoch() const { return epoch_; }
  // Recording can be paused (warm-up steps); a paused tracer drops events.
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  int64_t now_us() const;

  // A "ph":"X" event. args_json: a JSON object ("{\"bytes\":4096}") or "".
  void complete(std::string name, std::string category, int64_t start_us, int64_t dur_us,
                std::string args_json = "", Lane lane = Lane::kCompute);
  // A "ph":"C" event: a counter track named `name` (memory, loss scale...).
  void counter(std::string name, int64_t ts_us, double value);

  // Records [construction, destruction) on destruction. A null tracer costs
  // one branch: nothing is copied, no clock is read.
  class Span {
   public:
    Span(Tracer* tracer, std::string_view name, std::string_view category,
         Lane lane = Lane::kCompute);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    // Attaches a JSON object as the event's args.
    void set_args(std::string args_json) {
      if (tracer_) args_ = std::move(args_json);
    }

   private:
    Tracer* tracer_;
    Lane lane_ = Lane::kCompute;
    int64_t start_us_ = 0;
    std::string name_, category_, args_;
  };

  // The time of [from_us, to_us) covered by compute-lane spans, by comm-lane
  // spans not overlapped by compute, and by neither (idle); span_us = to - from.
  // The bubble fraction of a pipeline step is idle_us / span_us.
  struct BusyStats {
    double compute_us = 0, comm_us = 0, idle_us = 0, span_us = 0;
  };
  BusyStats busy(int64_t from_us, int64_t to_us) const;

  size_t size() const;  // events recorded
  void clear();
  // {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}, with
  // metadata events naming the process "rank N" and the lanes.
  std::string json() const;
  // Atomically (base/atomic_file.h); kIo error naming the path on failure.
  void write(const std::string& path) const;

  // `s` as a JSON string literal, quotes included.
  static std::string quote(std::string_view s);

 private:
  struct Event {
    std::string name, category, args;
    int64_t ts = 0, dur = 0;
    double value = 0;
    Lane lane = Lane::kCompute;
    char ph = 'X';
  };

  int rank_;
  Clock::time_point epoch_;
  std::atomic<bool> enabled_{true};
  mutable std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace kiri
