#include "kiri/comm/local/local_group.h"

#include <algorithm>
#include <cstring>

#include "kiri/comm/diagnosis.h"

namespace kiri::comm::detail {

void LocalWorld::abort(int world_rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  failed_rank_ = world_rank;
  failure_ = what;
  aborted_ = true;
}

int LocalWorld::failed_rank() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_rank_;
}

void LocalWorld::check(const GroupInfo& group, const std::string& op) const {
  if (!aborted_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  KIRI_RAISE(kCommAborted, "world rank ", failed_rank_, " failed (", failure_, "), so ", op, " ",
             group.where(), " is aborted");
}

void LocalWorld::set_activity(int world_rank, const std::string& activity) {
  std::lock_guard<std::mutex> lock(mutex_);
  activity_[world_rank] = activity;
}

std::string LocalWorld::activity(int world_rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return activity_[world_rank];
}

LocalGroup::LocalGroup(std::shared_ptr<LocalWorld> w, std::vector<int> ranks)
    : world(std::move(w)), world_ranks(std::move(ranks)), books(world_ranks.size()) {}

namespace {

// Element access per dtype: E is the stored element, Acc what it is reduced
// in (bf16 and f16 in f32, i32 in i64).
template <typename E>
struct Elem {
  using Stored = E;
  using Acc = E;
  static Acc load(E v) { return v; }
  static E store(Acc a) { return a; }
};
struct Bf16Elem {  // bf16 bits, reduced in f32
  using Stored = uint16_t;
  using Acc = float;
  static float load(uint16_t v) { return bf16_to_float(v); }
  static uint16_t store(float a) { return float_to_bf16(a); }
};
struct F16Elem {  // IEEE half bits, reduced in f32 (a result past 65504 becomes inf)
  using Stored = uint16_t;
  using Acc = float;
  static float load(uint16_t v) { return half_to_float(v); }
  static uint16_t store(float a) { return float_to_half(a); }
};
template <>
struct Elem<int32_t> {
  using Stored = int32_t;
  using Acc = int64_t;
  static int64_t load(int32_t v) { return v; }
  static int32_t store(int64_t a) { return static_cast<int32_t>(a); }
};

// out[r][0, n) = op over ranks of in[r][0, n), block by block so that the
// outputs may alias the inputs (all_reduce is in place).
template <typename Codec>
void reduce_typed(const std::vector<const void*>& ins, const std::vector<void*>& outs, int64_t n,
                  ReduceOp op) {
  using E = typename Codec::Stored;
  using A = typename Codec::Acc;
  constexpr int64_t kBlock = 2048;
  A acc[kBlock];
  const int64_t size = static_cast<int64_t>(ins.size());
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const E* first = static_cast<const E*>(ins[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = Codec::load(first[i]);
    for (int64_t r = 1; r < size; ++r) {
      const E* src = static_cast<const E*>(ins[r]) + b;
      if (op == ReduceOp::kMax)
        for (int64_t i = 0; i < m; ++i) acc[i] = std::max(acc[i], Codec::load(src[i]));
      else
        for (int64_t i = 0; i < m; ++i) acc[i] += Codec::load(src[i]);
    }
    if (op == ReduceOp::kAvg)
      for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<A>(acc[i] / static_cast<A>(size));
    for (void* o : outs) {
      E* dst = static_cast<E*>(o) + b;
      for (int64_t i = 0; i < m; ++i) dst[i] = Codec::store(acc[i]);
    }
  }
}

void reduce(DType dtype, const std::vector<const void*>& ins, const std::vector<void*>& outs,
            int64_t n, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return reduce_typed<Elem<float>>(ins, outs, n, op);
    case DType::kF64:
      return reduce_typed<Elem<double>>(ins, outs, n, op);
    case DType::kBF16:
      return reduce_typed<Bf16Elem>(ins, outs, n, op);
    case DType::kF16:
      return reduce_typed<F16Elem>(ins, outs, n, op);
    case DType::kI32:
      return reduce_typed<Elem<int32_t>>(ins, outs, n, op);
    default:
      KIRI_RAISE(kInternal, "local reduce of ", dtype_name(dtype));
  }
}

char* at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

void build_split(LocalGroup& g, LocalSlot& s) {
  std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, parent rank)
  for (int p = 0; p < g.size(); ++p)
    if (s.sigs[p].color >= 0) members[s.sigs[p].color].emplace_back(s.sigs[p].key, p);
  s.new_group.assign(g.size(), nullptr);
  s.new_rank.assign(g.size(), -1);
  for (auto& [color, list] : members) {
    std::sort(list.begin(), list.end());  // by key, then by parent rank
    std::vector<int> world_ranks;
    for (auto [key, p] : list) world_ranks.push_back(g.world_ranks[p]);
    auto group = std::make_shared<LocalGroup>(g.world, world_ranks);
    for (size_t i = 0; i < list.size(); ++i) {
      s.new_group[list[i].second] = group;
      s.new_rank[list[i].second] = static_cast<int>(i);
    }
  }
}

}  // namespace

std::string execute_slot(const GroupInfo& info, LocalGroup& g, LocalSlot& s) {
  // The local backend always compares: different sizes would corrupt memory.
  std::string mismatch = mismatch_message(info, s.sigs);
  if (!mismatch.empty()) return mismatch;
  const Signature& sig = s.sigs[0];
  if (sig.kind == kSplitKind) {
    build_split(g, s);
    return "";
  }
  const int n = g.size();
  const auto dtype = static_cast<DType>(sig.dtype);
  const auto op = static_cast<ReduceOp>(sig.op);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  std::vector<const void*> ins(n);
  std::vector<void*> outs(n);
  switch (static_cast<OpKind>(sig.kind)) {
    case OpKind::kAllReduce:
      for (int r = 0; r < n; ++r) ins[r] = outs[r] = s.in[r].raw();
      reduce(dtype, ins, outs, sig.count, op);
      break;
    case OpKind::kReduceScatter:
      for (int q = 0; q < n; ++q) {
        const Range range = chunk_range(sig.count, n, q);
        for (int r = 0; r < n; ++r) ins[r] = at(s.in[r], range.begin);
        reduce(dtype, ins, {s.out[q].raw()}, range.size(), op);
      }
      break;
    case OpKind::kAllGather:
      for (int q = 0; q < n; ++q) {
        const Range range = chunk_range(sig.count, n, q);
        for (int r = 0; r < n; ++r)
          if (range.size() > 0)
            std::memmove(at(s.out[r], range.begin), s.in[q].raw(), range.size() * elem);
      }
      break;
    case OpKind::kBroadcast:
      for (int r = 0; r < n; ++r)
        if (r != sig.root && sig.count > 0)
          copy_bytes(s.in[r].raw(), s.in[r].device(), s.in[sig.root].raw(), s.in[sig.root].device(),
                     sig.count * elem);
      break;
    default:  // barrier: meeting is all it does
      break;
  }
  return "";
}

void match_p2p(LocalP2p& send, LocalP2p& recv, const GroupInfo& info) {
  if (send.t.dtype() != recv.t.dtype() || send.t.numel() != recv.t.numel()) {
    const std::string m =
        str("send of ", send.t.numel(), " x ", dtype_name(send.t.dtype()), " from ",
            info.rank_name(send.src), " to ", info.rank_name(send.dst), " (tag ", send.tag, ") on ",
            info.name, " met a recv of ", recv.t.numel(), " x ", dtype_name(recv.t.dtype()));
    send.error = recv.error = m;
  } else if (send.t.numel() > 0) {
    std::memmove(recv.t.raw(), send.t.raw(), send.t.nbytes());
  }
  send.done = recv.done = true;
}

}  // namespace kiri::comm::detail
