#pragma once
// The Work both backends return: test() polls the backend once, wait()
// polls until complete or until the timeout, then asks the backend for a
// diagnosis. Errors of the operation stick: every later test()/wait()
// raises them again. A timeout does not: the operation stays outstanding.
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "kiri/comm/op_book.h"

namespace kiri::comm::detail {

using Clock = std::chrono::steady_clock;

class PollingWork : public Work {
 public:
  bool test() final;
  void wait() final;
  bool complete() const { return complete_; }
  OpKind kind() const { return kind_; }
  // Records the operation on tracer's comm lane, from start_us until test()
  // sees it complete (or until note_finished(), when the backend saw it
  // finish first). A null tracer records nothing.
  void trace(Tracer* tracer, int64_t start_us, std::string name, std::string args_json);
  // The backend saw the transfer finish (MPI: while advancing another work).
  void note_finished();

 protected:
  // record: the OpBook's id for the operation; 0 for split (not an OpKind, not counted).
  PollingWork(std::shared_ptr<OpBook> book, OpKind kind, uint64_t record,
              std::chrono::milliseconds timeout);
  // Advances once; true when complete. Raises the operation's error.
  virtual bool poll() = 0;
  // Pauses until something may have changed, at most until `until`.
  virtual void idle(Clock::time_point until) = 0;
  // Called once the timeout has passed: raises kCommTimeout with a
  // diagnosis, or returns if the operation completed meanwhile.
  virtual void timed_out(double waited_s) = 0;
  // Tells the backend that this rank is (no longer) blocked in wait().
  virtual void set_waiting(bool /*waiting*/) {}

 private:
  std::shared_ptr<OpBook> book_;
  OpKind kind_;
  uint64_t record_;
  std::chrono::milliseconds timeout_;
  bool complete_ = false;
  std::exception_ptr error_;
  Tracer* tracer_ = nullptr;
  int64_t trace_start_us_ = 0, trace_end_us_ = -1;
  std::string trace_name_, trace_args_;
};

}  // namespace kiri::comm::detail
