#include "kiri/comm/polling_work.h"

#include "kiri/base/timer.h"

namespace kiri::comm::detail {

PollingWork::PollingWork(std::shared_ptr<OpBook> book, OpKind kind, uint64_t record,
                         std::chrono::milliseconds timeout)
    : book_(std::move(book)), kind_(kind), record_(record), timeout_(timeout) {}

bool PollingWork::test() {
  if (complete_) return true;
  if (error_) std::rethrow_exception(error_);
  try {
    if (poll()) {
      complete_ = true;
      if (record_) book_->done(record_);
      if (tracer_) {
        note_finished();
        tracer_->complete(std::move(trace_name_), "comm", trace_start_us_,
                          trace_end_us_ - trace_start_us_, std::move(trace_args_),
                          Tracer::Lane::kComm);
        tracer_ = nullptr;
      }
    }
  } catch (const Error& e) {
    // A timeout raised while diagnosing is not the operation's own error.
    if (e.kind() != ErrorKind::kCommTimeout) error_ = std::current_exception();
    throw;
  }
  return complete_;
}

void PollingWork::trace(Tracer* tracer, int64_t start_us, std::string name, std::string args_json) {
  if (!tracer || !tracer->enabled()) return;
  tracer_ = tracer;
  trace_start_us_ = start_us;
  trace_name_ = std::move(name);
  trace_args_ = std::move(args_json);
}

void PollingWork::note_finished() {
  if (tracer_ && trace_end_us_ < 0) trace_end_us_ = tracer_->now_us();
}

void PollingWork::wait() {
  if (complete_) return;
  Timer timer;
  const Clock::time_point deadline = Clock::now() + timeout_;
  // Stats and the waiting flag are settled however wait() leaves.
  struct Settle {
    PollingWork* w;
    Timer& t;
    ~Settle() {
      w->set_waiting(false);
      if (w->record_) w->book_->add_wait(w->kind_, t.seconds());
    }
  } settle{this, timer};
  set_waiting(true);
  while (!test()) {
    if (Clock::now() >= deadline) {
      timed_out(timer.seconds());
      if (complete_) return;
      KIRI_RAISE(kInternal, op_kind_name(kind_), ": timed_out() returned before completion");
    }
    idle(deadline);
  }
}

}  // namespace kiri::comm::detail
