#pragma once
// Shared state of the local backend. A LocalGroup is one communicator's
// meeting place: every collective is a slot keyed by its seq where each rank
// leaves its tensors; the first rank to poll a full slot computes the result
// for all of them (progress happens only when polled, as with MPI). Send and
// recv meet in FIFO queues keyed by (source, destination, tag).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kiri/comm/op_book.h"

namespace kiri::comm::detail {

// One run_local: what all of its groups share.
class LocalWorld {
 public:
  explicit LocalWorld(int size) : activity_(size) {}
  // Records the first failure; later operations of every rank raise kCommAborted.
  void abort(int world_rank, const std::string& what);
  bool aborted() const { return aborted_.load(); }
  int failed_rank() const;
  // Raises kCommAborted naming the failed rank, if any.
  void check(const GroupInfo& group, const std::string& op) const;
  void set_activity(int world_rank, const std::string& activity);
  std::string activity(int world_rank) const;

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> aborted_{false};
  int failed_rank_ = -1;
  std::string failure_;
  std::vector<std::string> activity_;  // per world rank; "" outside communication
};

class LocalGroup;

// One collective (or split) in flight, by group rank.
struct LocalSlot {
  explicit LocalSlot(int n) : sigs(n), in(n), out(n) {}
  std::vector<Signature> sigs;
  std::vector<Tensor> in, out;
  int count = 0;
  bool claimed = false, done = false;
  std::string error;  // kCommMismatch message
  int consumed = 0;
  // split results by parent rank
  std::vector<std::shared_ptr<LocalGroup>> new_group;
  std::vector<int> new_rank;
};

struct LocalP2p {
  int src = 0, dst = 0, tag = 0;
  Tensor t;
  bool done = false;
  std::string error;
};

class LocalGroup {
 public:
  LocalGroup(std::shared_ptr<LocalWorld> world, std::vector<int> world_ranks);
  int size() const { return static_cast<int>(world_ranks.size()); }

  const std::shared_ptr<LocalWorld> world;
  const std::vector<int> world_ranks;

  std::mutex mutex;
  std::condition_variable cv;
  uint64_t version = 0;  // bumped (under mutex) on every change waiters may care about
  std::map<uint64_t, LocalSlot> slots;
  std::map<std::tuple<int, int, int>, std::deque<std::shared_ptr<LocalP2p>>> sends, recvs;
  std::vector<std::shared_ptr<OpBook>> books;  // by group rank; null once its communicator is gone

  void changed() {  // with mutex held
    ++version;
    cv.notify_all();
  }
};

// Computes a full slot's result into every rank's output (outside the mutex:
// the slot is claimed, and its ranks do not touch their tensors until done).
// Returns a mismatch message, or "".
std::string execute_slot(const GroupInfo& info, LocalGroup& group, LocalSlot& slot);
// Pairs a send with a recv: copies, or sets both errors.
void match_p2p(LocalP2p& send, LocalP2p& recv, const GroupInfo& info);

}  // namespace kiri::comm::detail
