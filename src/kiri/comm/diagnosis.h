#pragma once
// Messages for humans when ranks disagree or hang: which rank diverged
// first, which ranks are behind or missing, and each rank's last operations.
#include <string>
#include <vector>

#include "kiri/comm/op_book.h"

namespace kiri::comm::detail {

// "" when every rank called the same collective; otherwise names the first
// divergent rank (majority vote over more than 2 ranks; with 2, both ranks
// and what each called).
std::string mismatch_message(const GroupInfo& group, const std::vector<Signature>& sigs);

// What one rank told us (or what we could read) after a timeout.
struct RankReport {
  bool answered = false;
  std::string activity;  // "waiting in all_reduce #5 on world"; "" when outside communication
  std::vector<OpRecord> ring;
};

struct HangContext {
  GroupInfo group;
  std::string op;    // describe(signature) of the operation that timed out
  uint64_t seq = 0;  // its collective seq; 0 for send/recv
  double waited_s = 0;
  double grace_s = 0;  // how long we waited for answers
  std::string hint;    // the cause when the rings show none (send/recv: the peer), or ""
};

// The kCommTimeout message: the likely cause, then one line per rank.
std::string diagnose_hang(const HangContext& context, const std::vector<RankReport>& reports);

// Throws the HangError of diagnose_hang's message, with the world ranks that did not answer.
[[noreturn]] void raise_hang(const HangContext& context, const std::vector<RankReport>& reports,
                             const char* file, int line);

}  // namespace kiri::comm::detail
