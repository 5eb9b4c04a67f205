#pragma once
// Agreeing on failure: a step that can fail on some ranks only (loading one's part of a
// checkpoint, a per-rank check) runs on every rank, then the group agrees, so that every
// rank stops at the same point with the first failing rank's error instead of the healthy
// ranks waiting in their next collective until the timeout.
#include <functional>
#include <string>

#include "kiri/base/error.h"
#include "kiri/comm/communicator.h"

namespace kiri::comm {

// An error every rank of a group raised together: the kind and message of the lowest
// failing rank, `failed_rank` (of the group), and how many ranks failed. Since every rank
// holds it, one of them (the job's rank 0) prints it.
class AgreedError : public Error {
 public:
  AgreedError(ErrorKind kind, const std::string& message, const std::string& where, int failed_rank,
              int failures);
  int failed_rank() const { return failed_rank_; }
  int failures() const { return failures_; }

 private:
  int failed_rank_, failures_;
};

// Runs `body` on this rank, then (collective over `group`: one all_gather, and a broadcast
// of the message when some rank failed) raises AgreedError on every rank if body raised on
// any. A group of one rank runs body alone and lets its error through unchanged. An
// exception that is not a kiri::Error counts as kInternal.
void run_agreed(Communicator& group, const std::function<void()>& body);

}  // namespace kiri::comm
