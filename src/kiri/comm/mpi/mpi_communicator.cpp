// The MPI backend's Communicator: each call builds an MpiWork (what to agree
// on, how to start the non-blocking MPI call, what to do after) and submits it.
#include <algorithm>
#include <climits>
#include <cstring>

#include "kiri/comm/mpi/mpi_core.h"
#include "kiri/comm/mpi/mpi_ring.h"
#include "kiri/comm/mpi/mpi_runtime.h"

namespace kiri::comm {
namespace detail {
namespace {

int checked_count(int64_t n, const char* what) {
  KIRI_CHECK(n <= INT_MAX, what, " of ", n, " elements: MPI-3 counts stop at ", INT_MAX);
  return static_cast<int>(n);
}

// avg = sum / size, after MPI summed.
void divide(const Tensor& t, int n) {
  const int64_t count = t.numel();
  switch (t.dtype()) {
    case DType::kF32: {
      float* p = t.data<float>();
      for (int64_t i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
      break;
    }
    case DType::kF64: {
      double* p = t.data<double>();
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DType::kI32: {
      int32_t* p = t.data<int32_t>();
      for (int64_t i = 0; i < count; ++i) p[i] /= n;
      break;
    }
    case DType::kBF16: {
      auto* p = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0; i < count; ++i)
        p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(n));
      break;
    }
    case DType::kF16: {
      auto* p = static_cast<uint16_t*>(t.raw());
      for (int64_t i = 0; i < count; ++i)
        p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(n));
      break;
    }
    default:
      KIRI_RAISE(kInternal, "avg of ", dtype_name(t.dtype()));
  }
}

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kBF16 || d == DType::kF16;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MpiComm comm, const std::string& name, const Options& options)
      : core_(std::make_unique<MpiCore>(std::move(comm), name, options)) {}

  int rank() const override { return core_->info.rank; }
  int size() const override { return core_->info.size; }
  std::string name() const override { return core_->info.name; }

  WorkHandle all_reduce_async(Tensor& t, ReduceOp op) override;
  WorkHandle reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override;
  WorkHandle all_gather_async(const Tensor& in, Tensor& out) override;
  WorkHandle broadcast_async(Tensor& t, int root) override;
  WorkHandle barrier_async() override;
  WorkHandle send_async(const Tensor& t, int peer, int tag) override {
    return p2p(OpKind::kSend, t, peer, tag);
  }
  WorkHandle recv_async(Tensor& t, int peer, int tag) override {
    return p2p(OpKind::kRecv, t, peer, tag);
  }

  // Errors stay with their works. Advances the process's other communicators
  // too (see MpiCore::progress_all).
  void progress() override { MpiCore::progress_all(); }
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  const Options& options() const override { return core_->options; }
  void set_options(const Options& o) override { core_->options = o; }
  OpStats stats(OpKind kind) const override { return core_->book->stats(kind); }
  void reset_stats() override { core_->book->reset_stats(); }
  std::vector<OpRecord> recent_ops() const override { return core_->book->recent(); }

 private:
  // A collective's work: numbered, counted, described; the caller fills in issue.
  std::shared_ptr<MpiWork> collective(Signature sig, int64_t bytes, int root) {
    const int64_t start_us = trace_now(tracer_);
    sig.seq = core_->book->next_collective_seq();
    const bool is_split = sig.kind == kSplitKind;
    const OpKind kind = is_split ? OpKind::kBarrier : static_cast<OpKind>(sig.kind);
    const uint64_t record = is_split
                                ? 0
                                : core_->book->begin(kind, sig.seq, bytes, root,
                                                     traffic(kind, bytes, size(), rank(), root));
    auto w = std::make_shared<MpiWork>(core_.get(), kind, record, describe(sig), sig.seq);
    w->sig = sig;
    if (tracer_)
      w->trace(tracer_, start_us, is_split ? "split" : op_kind_name(kind),
               trace_args(bytes, name(), sig.seq, root >= 0 ? "root" : nullptr, root));
    return w;
  }
  WorkHandle submit(const std::shared_ptr<MpiWork>& w) {
    core_->submit(w, true);
    return w;
  }
  WorkHandle p2p(OpKind kind, const Tensor& t, int peer, int tag);
  // Only F32/F64: the ring reduces in the element type, and BF16/F16 must
  // be reduced in f32 (they take MPI_Iallreduce with kiri's user ops).
  bool use_ring(const Tensor& t) const {
    if (size() == 1 || (t.dtype() != DType::kF32 && t.dtype() != DType::kF64)) return false;
    const int64_t bytes = static_cast<int64_t>(t.nbytes());
    return bytes >= core_->options.ring_all_reduce_bytes || use_pair(bytes);
  }
  // Options::pair_piece_bytes where it applies, else 0.
  int64_t pair_pieces() const {
    return core_->pair_across_hosts ? core_->options.pair_piece_bytes : 0;
  }
  // The seq tells apart kiri's own transfers in flight at once (on `ring`), whose messages
  // may be posted in different orders on different ranks.
  int ring_tag(const MpiWork& w) const {
    return static_cast<int>(w.seq % (static_cast<uint64_t>(core_->max_tag) + 1));
  }
  // A transfer kiri drives itself (Ring, PairExchange): posted when the work is
  // agreed, advanced by every poll.
  template <typename Transfer>
  void drive(MpiWork& w, std::shared_ptr<Transfer> t) const {
    MpiWork* raw = &w;
    const MpiCore* core = core_.get();
    w.issue = [t](MPI_Request*) { return t->start(); };
    w.drive = [t, raw, core] {
      int rc = MPI_SUCCESS;
      const char* call = "";
      const bool done = t->advance(rc, call);
      if (rc != MPI_SUCCESS) mpi_check(rc, call, str(raw->what, " ", core->info.where()));
      return done;
    };
  }
  // Two ranks on two hosts exchange in eager pieces (Options::pair_piece_bytes) above this.
  bool use_pair(int64_t bytes) const { return pair_pieces() > 0 && bytes > pair_pieces(); }
  // A BF16/F16 sum (or mean) on two ranks on two hosts, of any size: one exchange in eager
  // pieces, where MPI's collective would send a large message by rendezvous (docs/comm.md).
  // F32/F64 keep the ring: a whole 12.6 MB bucket as one exchange made naive DP's step
  // 10-15% slower than the ring's two steps at 2gbit (not explained). Max keeps MPI's:
  // max(+0, -0) depends on the order of its arguments.
  bool use_pair_sum(const Tensor& t, ReduceOp op) const {
    return pair_pieces() > 0 && t.numel() > 0 &&
           (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16) &&
           (op == ReduceOp::kSum || op == ReduceOp::kAvg);
  }
  // A ring that crosses hosts takes reduce_scatter and all_gather from this size on.
  bool use_ring_halves(int64_t bytes) const {
    return core_->ring_across_hosts && bytes > 0 && bytes >= core_->options.ring_all_reduce_bytes;
  }
  // Scratch from Options::scratch_memory (null: the process's pool): uninitialised, or a
  // copy of t.
  std::shared_ptr<AllocatorCore> memory() const { return core_->options.scratch_memory; }
  std::unique_ptr<PooledScratch> take_scratch(size_t bytes) const {
    return std::make_unique<PooledScratch>(static_cast<int64_t>(bytes), memory());
  }
  std::unique_ptr<PooledScratch> copy_to_scratch(const Tensor& t) const {
    auto s = take_scratch(t.nbytes());
    copy_bytes(s->data(), Device::kHost, t.raw(), t.device(), t.nbytes());
    return s;
  }
  int64_t ring_piece_bytes() const {
    const int64_t pair = pair_pieces();
    return pair > 0 ? std::min(pair, core_->options.ring_piece_bytes)
                    : core_->options.ring_piece_bytes;
  }

  std::unique_ptr<MpiCore> core_;
};

WorkHandle MpiCommunicator::all_reduce_async(Tensor& t, ReduceOp op) {
  const Signature sig = all_reduce_signature(t, op);
  const int count = checked_count(t.numel(), "all_reduce");
  const MPI_Datatype type = mpi_type(t.dtype());
  const MPI_Op mop = mpi_op(t.dtype(), op);
  auto w = collective(sig, static_cast<int64_t>(t.nbytes()), -1);
  w->keep = {t};
  void* buf = t.numel() ? t.raw() : nullptr;
  if (use_pair_sum(t, op)) {
    // Two ranks on two hosts: one exchange of the whole tensor, each rank adding the other's
    // to its own in f32 and rounding (a + b == b + a, so both hold the same bits).
    auto peer = std::make_shared<PooledScratch>(static_cast<int64_t>(t.nbytes()), memory());
    drive(*w, std::make_shared<PairExchange>(buf, t.nbytes(), peer->data(), t.nbytes(),
                                             core_->ring.get(), 1 - rank(), ring_tag(*w),
                                             pair_pieces()));
    w->finish = [peer, t, op] {
      combine(t.raw(), peer->data(), t.numel(), t.dtype(), op);
      if (op == ReduceOp::kAvg) divide(t, 2);
    };
    return submit(w);
  }
  if (use_ring(t)) {
    drive(*w,
          std::make_shared<Ring>(RingKind::kAllReduce, buf, t.numel(), t.dtype(), op,
                                 core_->ring.get(), ring_tag(*w), ring_piece_bytes(), memory()));
  } else {
    MPI_Comm c = core_->comm.get();
    w->issue = [=](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, buf, count, type, mop, c, r);
    };
  }
  if (op == ReduceOp::kAvg) w->finish = [t, n = size()] { divide(t, n); };
  return submit(w);
}

WorkHandle MpiCommunicator::reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) {
  const Signature sig = reduce_scatter_signature(in, out, op, size(), rank());
  checked_count(in.numel(), "reduce_scatter");
  const MPI_Datatype type = mpi_type(in.dtype());
  const MPI_Op mop = mpi_op(in.dtype(), op);
  auto w = collective(sig, static_cast<int64_t>(in.nbytes()), -1);
  w->keep = {in, out};
  for (int r = 0; r < size(); ++r)
    w->counts.push_back(static_cast<int>(chunk_range(in.numel(), size(), r).size()));
  const bool f32 = in.dtype() == DType::kF32 || in.dtype() == DType::kF64;
  if (is_float(in.dtype()) && use_pair(static_cast<int64_t>(in.nbytes()))) {
    // Two ranks on two hosts: send the peer's chunk of `in`, receive the peer's part of this
    // rank's chunk into scratch, add this rank's own (a + b == b + a: both ranks' sums are the
    // bits a rank-ordered sum would give).
    const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype()));
    const Range peer = chunk_range(in.numel(), 2, 1 - rank()),
                mine = chunk_range(in.numel(), 2, rank());
    w->scratch = take_scratch(out.nbytes());
    drive(*w, std::make_shared<PairExchange>(static_cast<const char*>(in.raw()) + peer.begin * elem,
                                             peer.size() * elem, w->scratch->data(), out.nbytes(),
                                             core_->ring.get(), 1 - rank(), ring_tag(*w),
                                             pair_pieces()));
    MpiWork* raw = w.get();
    w->finish = [raw, in, out, op, mine, elem] {
      combine(raw->scratch->data(), static_cast<const char*>(in.raw()) + mine.begin * elem,
              out.numel(), out.dtype(), op);
      copy_bytes(out.raw(), out.device(), raw->scratch->data(), Device::kHost, out.nbytes());
      if (op == ReduceOp::kAvg) divide(out, 2);
    };
    return submit(w);
  }
  if (f32 && use_ring_halves(static_cast<int64_t>(in.nbytes()))) {
    // A ring across hosts: reduce a copy of `in` (the ring works in place), keep chunk rank.
    const int64_t elem = static_cast<int64_t>(dtype_size(in.dtype()));
    const Range mine = chunk_range(in.numel(), size(), rank());
    w->scratch = copy_to_scratch(in);
    drive(*w, std::make_shared<Ring>(RingKind::kReduceScatter, w->scratch->data(), in.numel(),
                                     in.dtype(), op, core_->ring.get(), ring_tag(*w),
                                     core_->options.ring_piece_bytes, memory()));
    MpiWork* raw = w.get();
    w->finish = [raw, out, op, n = size(), offset = mine.begin * elem] {
      copy_bytes(out.raw(), out.device(), raw->scratch->data() + offset, Device::kHost,
                 out.nbytes());
      if (op == ReduceOp::kAvg) divide(out, n);
    };
    return submit(w);
  }
  // MPI refuses overlapping buffers: receive into scratch, copy after.
  if (overlaps(in, out)) w->scratch = take_scratch(out.nbytes());
  MpiWork* raw = w.get();
  MPI_Comm c = core_->comm.get();
  w->issue = [raw, in, out, type, mop, c](MPI_Request* r) {
    void* dst = raw->scratch ? raw->scratch->data() : out.raw();
    return MPI_Ireduce_scatter(in.raw(), dst, raw->counts.data(), type, mop, c, r);
  };
  w->finish = [raw, out, op, n = size()] {
    if (raw->scratch)
      copy_bytes(out.raw(), out.device(), raw->scratch->data(), Device::kHost, out.nbytes());
    if (op == ReduceOp::kAvg) divide(out, n);
  };
  return submit(w);
}

WorkHandle MpiCommunicator::all_gather_async(const Tensor& in, Tensor& out) {
  const Signature sig = all_gather_signature(in, out, size(), rank());
  checked_count(out.numel(), "all_gather");
  const MPI_Datatype type = mpi_type(in.dtype());
  auto w = collective(sig, static_cast<int64_t>(out.nbytes()), -1);
  w->keep = {in, out};
  for (int r = 0; r < size(); ++r) {
    const Range range = chunk_range(out.numel(), size(), r);
    w->counts.push_back(static_cast<int>(range.size()));
    w->displs.push_back(static_cast<int>(range.begin));
  }
  // In place when the input is this rank's chunk of the output; a copy
  // when they overlap otherwise.
  const Range mine = chunk_range(out.numel(), size(), rank());
  const bool in_place = in.numel() > 0 && static_cast<const char*>(in.raw()) ==
                                              static_cast<const char*>(out.raw()) +
                                                  mine.begin * dtype_size(out.dtype());
  if (!in_place && overlaps(in, out)) w->scratch = copy_to_scratch(in);
  if (use_pair(static_cast<int64_t>(out.nbytes()))) {
    // Two ranks on two hosts: send this rank's chunk, receive the peer's into place.
    const int64_t elem = static_cast<int64_t>(dtype_size(out.dtype()));
    const Range peer = chunk_range(out.numel(), 2, 1 - rank());
    const void* src = w->scratch ? static_cast<const void*>(w->scratch->data()) : in.raw();
    drive(*w, std::make_shared<PairExchange>(
                  src, in.nbytes(), static_cast<char*>(out.raw()) + peer.begin * elem,
                  peer.size() * elem, core_->ring.get(), 1 - rank(), ring_tag(*w), pair_pieces()));
    if (!in_place)
      w->finish = [out, src, offset = mine.begin * elem, bytes = in.nbytes()] {
        copy_bytes(static_cast<char*>(out.raw()) + offset, out.device(), src, Device::kHost, bytes);
      };
    return submit(w);
  }
  if (use_ring_halves(static_cast<int64_t>(out.nbytes()))) {
    // A ring across hosts: this rank's chunk into place first, then the ring fills the rest.
    const int64_t elem = static_cast<int64_t>(dtype_size(out.dtype()));
    if (!in_place) {
      const void* src = w->scratch ? static_cast<const void*>(w->scratch->data()) : in.raw();
      copy_bytes(static_cast<char*>(out.raw()) + mine.begin * elem, out.device(), src,
                 Device::kHost, in.nbytes());
    }
    drive(*w, std::make_shared<Ring>(RingKind::kAllGather, out.raw(), out.numel(), out.dtype(),
                                     ReduceOp::kSum, core_->ring.get(), ring_tag(*w),
                                     core_->options.ring_piece_bytes, memory()));
    return submit(w);
  }
  MpiWork* raw = w.get();
  MPI_Comm c = core_->comm.get();
  const int me = rank();
  w->issue = [raw, in, out, type, c, in_place, me](MPI_Request* r) {
    const void* src = in_place       ? MPI_IN_PLACE
                      : raw->scratch ? static_cast<const void*>(raw->scratch->data())
                                     : in.raw();
    return MPI_Iallgatherv(src, raw->counts[me], type, out.raw(), raw->counts.data(),
                           raw->displs.data(), type, c, r);
  };
  return submit(w);
}

WorkHandle MpiCommunicator::broadcast_async(Tensor& t, int root) {
  const Signature sig = broadcast_signature(t, root, size());
  const int count = checked_count(t.numel(), "broadcast");
  const MPI_Datatype type = mpi_type(t.dtype());
  auto w = collective(sig, static_cast<int64_t>(t.nbytes()), root);
  w->keep = {t};
  void* buf = t.numel() ? t.raw() : nullptr;
  MPI_Comm c = core_->comm.get();
  w->issue = [=](MPI_Request* r) { return MPI_Ibcast(buf, count, type, root, c, r); };
  return submit(w);
}

WorkHandle MpiCommunicator::barrier_async() {
  Signature sig;
  sig.kind = static_cast<int32_t>(OpKind::kBarrier);
  auto w = collective(sig, 0, -1);
  MPI_Comm c = core_->comm.get();
  w->issue = [c](MPI_Request* r) { return MPI_Ibarrier(c, r); };
  return submit(w);
}

WorkHandle MpiCommunicator::p2p(OpKind kind, const Tensor& t, int peer, int tag) {
  const int64_t start_us = trace_now(tracer_);
  check_tensor(t, op_kind_name(kind));
  check_peer(peer, tag, size(), core_->max_tag);
  const int count = checked_count(t.numel(), op_kind_name(kind));
  const MPI_Datatype type = mpi_type(t.dtype());
  const bool send = kind == OpKind::kSend;
  const uint64_t seq = core_->book->next_p2p_seq();
  const std::string what =
      str(op_kind_name(kind), " #", seq, " (", count, " x ", dtype_name(t.dtype()),
          send ? " to " : " from ", core_->info.rank_name(peer), ", tag ", tag, ")");
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  const uint64_t record =
      core_->book->begin(kind, seq, bytes, peer, traffic(kind, bytes, size(), rank(), peer));
  auto w = std::make_shared<MpiWork>(core_.get(), kind, record, what, 0);
  if (tracer_)
    w->trace(tracer_, start_us, op_kind_name(kind), trace_args(bytes, name(), seq, "peer", peer));
  w->keep = {t};
  w->peer = peer;
  w->tag = tag;
  void* buf = t.numel() ? t.raw() : nullptr;
  MPI_Comm c = core_->comm.get();
  if (send) {
    w->issue = [=](MPI_Request* r) { return MPI_Isend(buf, count, type, peer, tag, c, r); };
  } else {
    w->recv_type = type;
    w->recv_count = count;
    w->issue = [=](MPI_Request* r) { return MPI_Irecv(buf, count, type, peer, tag, c, r); };
  }
  core_->submit(w, false);
  return w;
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  Signature sig;
  sig.kind = kSplitKind;
  sig.color = color < 0 ? -1 : color;
  sig.key = key;
  // Agreeing first (always) makes split time out instead of hanging when a
  // rank never calls it; after that MPI_Comm_split cannot wait long.
  auto w = collective(sig, 0, -1);
  core_->submit(w, true);
  w->wait();
  MPI_Comm out = core_->split(color, key);
  if (out == MPI_COMM_NULL) return nullptr;
  auto sub = std::make_unique<MpiCommunicator>(MpiComm(out), name, core_->options);
  sub->set_tracer(tracer_);
  return sub;
}

}  // namespace
}  // namespace detail

std::unique_ptr<Communicator> mpi_world(Options options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  KIRI_CHECK(initialized && !detail::mpi_finalized(),
             "mpi_world() needs MPI initialised: create a kiri::comm::MpiRuntime first");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm world;
  detail::mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup", "of MPI_COMM_WORLD");
  return std::make_unique<detail::MpiCommunicator>(detail::MpiComm(world), "world", options);
}

}  // namespace kiri::comm
