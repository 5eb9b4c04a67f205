#pragma once
// What both backends share: the signature ranks agree on before a
// collective, the byte-count formulas, argument checks, and the OpBook
// (statistics and the ring of recent operations).
#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"

namespace kiri::comm::detail {

// Not an OpKind: split() agrees on its own marker so that a rank calling
// split while another calls a collective is a mismatch, not a hang.
constexpr int32_t kSplitKind = 100;
constexpr size_t kRingSize = 64;

// What every rank of a group must agree on before a collective. Fixed size
// and trivially copyable: it travels as raw bytes.
struct Signature {
  uint64_t seq = 0;
  int64_t count = 0;  // the whole tensor's elements
  int32_t kind = 0;   // OpKind or kSplitKind
  int32_t dtype = -1;
  int32_t root = -1;
  int32_t op = -1;    // ReduceOp, or -1
  int32_t color = 0;  // split only; not compared
  int32_t key = 0;    // split only; not compared
};
bool same_op(const Signature& a, const Signature& b);
// "all_reduce #5 (1000 x F32, sum)", "broadcast #3 (10 x BF16, root 1)".
std::string describe(const Signature& s);
// The names ranks go by in messages: "rank 2", or "rank 2 (world 5)" in a sub-group.
struct GroupInfo {
  std::string name;
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // group rank -> world rank
  std::string rank_name(int r) const;
  std::string ranks_list(const std::vector<int>& ranks) const;  // "ranks 0, 1, 3"
  std::string where() const;                                    // "on dp (rank 1 of 2, world 3)"
};

// Bytes one rank sends and receives, as the algorithm moves them (docs/comm.md).
struct Traffic {
  int64_t sent = 0, received = 0;
};
Traffic traffic(OpKind kind, int64_t bytes, int size, int rank, int root);

// Argument checks shared by the backends; raise kInvalidArgument.
bool reducible(DType dtype);
void check_tensor(const Tensor& t, const char* what);
Signature all_reduce_signature(const Tensor& t, ReduceOp op);
Signature reduce_scatter_signature(const Tensor& in, const Tensor& out, ReduceOp op, int size,
                                   int rank);
Signature all_gather_signature(const Tensor& in, const Tensor& out, int size, int rank);
Signature broadcast_signature(const Tensor& t, int root, int size);
void check_peer(int peer, int tag, int size, int max_tag);

// Statistics and the ring of recent operations of one communicator. Locked:
// in the local backend other ranks' threads read the ring for diagnoses.
class OpBook {
 public:
  // Collectives and split share one count, so that every rank numbers them alike.
  uint64_t next_collective_seq() { return ++collective_seq_; }
  uint64_t next_p2p_seq() { return ++p2p_seq_; }
  // Counts the call and its traffic; returns an id for done().
  uint64_t begin(OpKind kind, uint64_t seq, int64_t bytes, int peer, Traffic t);
  void done(uint64_t id);
  void add_wait(OpKind kind, double seconds);
  OpStats stats(OpKind kind) const;
  void reset_stats();
  std::vector<OpRecord> recent() const;

 private:
  mutable std::mutex mutex_;
  uint64_t collective_seq_ = 0, p2p_seq_ = 0, next_id_ = 0;
  std::array<OpStats, kNumOpKinds> stats_{};
  std::deque<std::pair<uint64_t, OpRecord>> ring_;  // id, record
};

// A trace span's args: {"bytes":N,"group":"dp","seq":S} plus, when extra is
// given, {..., extra:value} ("peer" for send/recv, "root" for broadcast).
std::string trace_args(int64_t bytes, const std::string& group, uint64_t seq,
                       const char* extra = nullptr, int value = 0);
// Now on the tracer's clock, or 0 without one.
inline int64_t trace_now(const Tracer* tracer) {
  return tracer ? tracer->now_us() : 0;
}

// "#12 all_reduce 3.91 KiB done", "#3 send 40 B to 1 pending".
std::string describe(const OpRecord& r);

}  // namespace kiri::comm::detail
