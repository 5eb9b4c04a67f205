#include "kiri/comm/op_book.h"

#include "kiri/base/units.h"

namespace kiri::comm::detail {

bool same_op(const Signature& a, const Signature& b) {
  return a.seq == b.seq && a.kind == b.kind && a.count == b.count && a.dtype == b.dtype &&
         a.root == b.root && a.op == b.op;
}

std::string describe(const Signature& s) {
  // Built on every call: plain concatenation, no stream.
  const std::string seq = " #" + std::to_string(s.seq);
  if (s.kind == kSplitKind) return "split" + seq;
  const auto kind = static_cast<OpKind>(s.kind);
  std::string text = op_kind_name(kind) + seq;
  if (kind == OpKind::kBarrier) return text;
  text += " (" + std::to_string(s.count) + " x " + dtype_name(static_cast<DType>(s.dtype));
  if (s.op >= 0) text += std::string(", ") + reduce_op_name(static_cast<ReduceOp>(s.op));
  if (kind == OpKind::kBroadcast) text += ", root " + std::to_string(s.root);
  return text + ")";
}

std::string GroupInfo::rank_name(int r) const {
  const bool sub = r >= 0 && r < static_cast<int>(world_ranks.size()) && world_ranks[r] != r;
  return sub ? str("rank ", r, " (world ", world_ranks[r], ")") : str("rank ", r);
}

std::string GroupInfo::ranks_list(const std::vector<int>& ranks) const {
  if (ranks.size() == 1) return rank_name(ranks[0]);
  std::string s = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string GroupInfo::where() const {
  std::string s = str("on ", name, " (rank ", rank, " of ", size);
  if (rank < static_cast<int>(world_ranks.size()) && world_ranks[rank] != rank)
    s += str(", world ", world_ranks[rank]);
  return s + ")";
}

Traffic traffic(OpKind kind, int64_t bytes, int size, int rank, int root) {
  const int64_t n = size;
  switch (kind) {
    case OpKind::kAllReduce:  // ring: reduce-scatter then all-gather
      return {2 * (n - 1) * bytes / n, 2 * (n - 1) * bytes / n};
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      return {(n - 1) * bytes / n, (n - 1) * bytes / n};
    case OpKind::kBroadcast:
      if (n == 1) return {};
      return rank == root ? Traffic{bytes, 0} : Traffic{0, bytes};
    case OpKind::kSend:
      return {bytes, 0};
    case OpKind::kRecv:
      return {0, bytes};
    case OpKind::kBarrier:
      return {};
  }
  return {};
}

bool reducible(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kBF16 || d == DType::kF16 ||
         d == DType::kI32;
}

void check_tensor(const Tensor& t, const char* what) {
  KIRI_CHECK(t.defined(), what, " tensor is undefined");
}

Signature all_reduce_signature(const Tensor& t, ReduceOp op) {
  check_tensor(t, "all_reduce");
  KIRI_CHECK(reducible(t.dtype()), "all_reduce of ", dtype_name(t.dtype()),
             ": only F32, F64, BF16, F16 and I32 reduce");
  return Signature{0,
                   t.numel(),
                   static_cast<int32_t>(OpKind::kAllReduce),
                   static_cast<int32_t>(t.dtype()),
                   -1,
                   static_cast<int32_t>(op)};
}

Signature reduce_scatter_signature(const Tensor& in, const Tensor& out, ReduceOp op, int size,
                                   int rank) {
  check_tensor(in, "reduce_scatter input");
  check_tensor(out, "reduce_scatter output");
  KIRI_CHECK(reducible(in.dtype()) && in.dtype() == out.dtype(), "reduce_scatter of ",
             dtype_name(in.dtype()), " into ", dtype_name(out.dtype()));
  const Range r = chunk_range(in.numel(), size, rank);
  KIRI_CHECK(out.numel() == r.size(), "reduce_scatter of ", in.numel(), " elements over ", size,
             " ranks: rank ", rank, " gets ", r.size(), " but its output has ", out.numel());
  return Signature{0,
                   in.numel(),
                   static_cast<int32_t>(OpKind::kReduceScatter),
                   static_cast<int32_t>(in.dtype()),
                   -1,
                   static_cast<int32_t>(op)};
}

Signature all_gather_signature(const Tensor& in, const Tensor& out, int size, int rank) {
  check_tensor(in, "all_gather input");
  check_tensor(out, "all_gather output");
  KIRI_CHECK(in.dtype() == out.dtype(), "all_gather of ", dtype_name(in.dtype()), " into ",
             dtype_name(out.dtype()));
  const Range r = chunk_range(out.numel(), size, rank);
  KIRI_CHECK(in.numel() == r.size(), "all_gather of ", out.numel(), " elements over ", size,
             " ranks: rank ", rank, " owns ", r.size(), " but its input has ", in.numel());
  return Signature{
      0,  out.numel(), static_cast<int32_t>(OpKind::kAllGather), static_cast<int32_t>(in.dtype()),
      -1, -1};
}

Signature broadcast_signature(const Tensor& t, int root, int size) {
  check_tensor(t, "broadcast");
  KIRI_CHECK(0 <= root && root < size, "broadcast root ", root, " outside a group of ", size);
  return Signature{
      0,    t.numel(), static_cast<int32_t>(OpKind::kBroadcast), static_cast<int32_t>(t.dtype()),
      root, -1};
}

void check_peer(int peer, int tag, int size, int max_tag) {
  KIRI_CHECK(0 <= peer && peer < size, "peer ", peer, " outside a group of ", size);
  KIRI_CHECK(0 <= tag && tag <= max_tag, "tag ", tag, " outside [0, ", max_tag, "]");
}

uint64_t OpBook::begin(OpKind kind, uint64_t seq, int64_t bytes, int peer, Traffic t) {
  std::lock_guard<std::mutex> lock(mutex_);
  OpStats& s = stats_[static_cast<int>(kind)];
  ++s.calls;
  s.bytes_sent += t.sent;
  s.bytes_received += t.received;
  if (ring_.size() == kRingSize) ring_.pop_front();
  ring_.emplace_back(++next_id_, OpRecord{seq, kind, bytes, peer, false});
  return next_id_;
}

void OpBook::done(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = ring_.rbegin(); it != ring_.rend(); ++it)
    if (it->first == id) {
      it->second.done = true;
      return;
    }
}

void OpBook::add_wait(OpKind kind, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_[static_cast<int>(kind)].wait_s += seconds;
}

OpStats OpBook::stats(OpKind kind) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_[static_cast<int>(kind)];
}

void OpBook::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = {};
}

std::vector<OpRecord> OpBook::recent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<OpRecord> out;
  out.reserve(ring_.size());
  for (const auto& [id, r] : ring_) out.push_back(r);
  return out;
}

std::string trace_args(int64_t bytes, const std::string& group, uint64_t seq, const char* extra,
                       int value) {
  std::string s = "{\"bytes\":" + std::to_string(bytes) + ",\"group\":" + Tracer::quote(group) +
                  ",\"seq\":" + std::to_string(seq);
  if (extra) s += str(",\"", extra, "\":", value);
  return s + "}";
}

std::string describe(const OpRecord& r) {
  std::string s = str("#", r.seq, " ", op_kind_name(r.kind));
  if (r.kind != OpKind::kBarrier) s += " " + format_bytes(r.bytes);
  if (r.kind == OpKind::kBroadcast) s += str(" root ", r.peer);
  if (r.kind == OpKind::kSend) s += str(" to ", r.peer);
  if (r.kind == OpKind::kRecv) s += str(" from ", r.peer);
  return s + (r.done ? " done" : " pending");
}

}  // namespace kiri::comm::detail
