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
    }
  } catch (const Error& e) {
    // A timeout raised while diagnosing is not the operation's own error.
    if (e.kind() != ErrorKind::kCommTimeout) error_ = std::current_exception();
    throw;
  }
  return complete_;
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
