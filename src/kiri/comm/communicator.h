#pragma once
// Communicator: every collective the parallel cuts need, blocking and
// asynchronous, on a group of ranks. Backends: MPI (comm/mpi/, the real one:
// laptop, cluster, Slurm) and local (comm/local/, ranks as threads of one
// process, so the same test bodies run fast under plain ctest).
//
// Semantics shared by all backends:
//  - Tensors are contiguous; element types F32, F64, BF16 and F16 (IEEE
//    half), I32. The 16-bit floats are reduced in f32 and rounded back (MPI:
//    at each step of its reduction tree), so an F16 sum past 65504 is inf.
//    Reductions: sum, average (sum / size), max. all_gather, broadcast and
//    send/recv take any dtype.
//  - reduce_scatter/all_gather split `total` elements into size() chunks with
//    chunk_range(): the first total % size ranks get one element more, so
//    sizes that do not divide evenly (and 0) work.
//  - Every call gets a sequence number: collectives (and split) count 1, 2, ...
//    in call order on each communicator, so the same seq names the same
//    collective on every rank; send/recv count separately (their order
//    legitimately differs between ranks). A ring of the last 64 operations
//    (seq, kind, bytes, peer/root) is kept for hang diagnosis. With
//    options.check_collectives, ranks first agree on (seq, kind, count,
//    dtype, root) of each collective: a mismatch raises kCommMismatch naming
//    the first divergent rank instead of computing garbage.
//  - wait() polls until done or until options.timeout passes: then it raises
//    kCommTimeout with a diagnosis (which ranks did not answer, which rank's
//    recent operations diverged first), never hangs. The operation stays
//    outstanding: progress() keeps driving it and wait() may be called again
//    (it completes if the late rank arrives).
//  - Buffers must stay untouched until the Work completes; the Work keeps
//    their storage alive. A backend is used from one thread per rank.
//  - Asynchronous work advances only when someone polls (MPI does not
//    progress on its own): progress() tests every outstanding request; the
//    trainer calls it between layers of backward.
//  - With a Tracer set (set_tracer), every operation is a span on the
//    tracer's comm lane, from the call until its completion is seen (by
//    test(), wait() or progress()), named by op_kind_name() ("split" for
//    split) with args {"bytes", "group", "seq"} (and "peer" or "root").
//    Communicators made by split() inherit the tracer. docs/trace.md.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiri/base/trace.h"
#include "kiri/tensor/tensor.h"

namespace kiri::comm {

enum class ReduceOp { kSum, kAvg, kMax };
enum class OpKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv, kBarrier };
constexpr int kNumOpKinds = 7;
const char* op_kind_name(OpKind kind);  // "all_reduce", ...

struct Options {
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  bool check_collectives = true;
  // After a timeout, how long to collect the other ranks' recent operations
  // for the diagnosis (ranks that do not answer within it are named missing).
  std::chrono::milliseconds diagnosis_grace{std::chrono::seconds(2)};
  // MPI backend: F32/F64 all_reduce of at least this many bytes runs kiri's
  // ring over point-to-point (comm/mpi/mpi_ring.h) instead of MPI_Iallreduce.
  // BF16/F16 never do (they reduce in f32 through MPI user ops).
  int64_t ring_all_reduce_bytes = int64_t{1} << 20;
  // ... whose chunks travel as messages of at most this many bytes.
  int64_t ring_piece_bytes = int64_t{1} << 30;
  // A group of two ranks on two hosts: every F32/F64 all_reduce above this many bytes runs the
  // ring, in messages of at most this many bytes. Both ranks send at once over the one TCP
  // connection Open MPI keeps per pair, and a message above the TCP BTL's eager limit (64 KiB
  // with its headers) waits for the peer's reply to its rendezvous, which queues behind the
  // peer's own data: the two directions took turns, each at half the link (docs/comm.md,
  // "Two ranks on two hosts"). Eager messages need no reply. reduce_scatter (F32/F64) and
  // all_gather of such a pair above it are one exchange in such messages too.
  int64_t pair_piece_bytes = 65408;
  // A group of more ranks whose ring crosses hosts: reduce_scatter (F32/F64) and all_gather of
  // at least ring_all_reduce_bytes run kiri's ring too (each link carries one direction; Open
  // MPI's algorithms exchanged both ways, at 2-5x the link's time: docs/comm.md).
  // Which groups count as crossing hosts: detected (MPI_COMM_TYPE_SHARED at the group's
  // creation), every group (ranks of one host that talk over TCP, `--mca btl tcp,self`; the
  // tests), none.
  enum class AcrossHosts { kDetect, kAlways, kNever };
  AcrossHosts across_hosts = AcrossHosts::kDetect;
  // Where kiri's own transfers take their scratch (the ring's incoming chunk, a pair's
  // received half, a reduce-scatter's working copy): the rank's allocator, category buffers,
  // so its memory by category counts them (the trainer passes its own). Null: a pool of the
  // process's, counted nowhere.
  std::shared_ptr<AllocatorCore> scratch_memory;
};
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max"

struct OpStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;  // by this rank, counted as the algorithm's volume (see docs/comm.md)
  int64_t bytes_received = 0;
  double wait_s = 0;  // time spent inside wait()/blocking calls
};

struct OpRecord {
  uint64_t seq = 0;
  OpKind kind = OpKind::kBarrier;
  int64_t bytes = 0;  // the whole tensor (reduce_scatter: input, all_gather: output)
  int peer = -1;      // root or peer; -1 for symmetric collectives
  bool done = false;
};

// [begin, end) of chunk `index` when `total` elements are split over `parts`.
struct Range {
  int64_t begin, end;
  int64_t size() const { return end - begin; }
};
Range chunk_range(int64_t total, int parts, int index);

class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;  // advances; true when complete
  virtual void wait() = 0;  // raises kCommTimeout past the timeout
};
using WorkHandle = std::shared_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "world", "dp", "tp", "pp", ... for messages

  // In place over t.
  virtual WorkHandle all_reduce_async(Tensor& t, ReduceOp op) = 0;
  // input: [total]; output: [chunk_range(total, size, rank).size()].
  virtual WorkHandle reduce_scatter_async(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // input: [chunk_range(total, size, rank).size()]; output: [total].
  virtual WorkHandle all_gather_async(const Tensor& input, Tensor& output) = 0;
  virtual WorkHandle broadcast_async(Tensor& t, int root) = 0;
  virtual WorkHandle send_async(const Tensor& t, int peer, int tag) = 0;
  virtual WorkHandle recv_async(Tensor& t, int peer, int tag) = 0;
  virtual WorkHandle barrier_async() = 0;

  void all_reduce(Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const Tensor& in, Tensor& out) { all_gather_async(in, out)->wait(); }
  void broadcast(Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  void send(const Tensor& t, int peer, int tag) { send_async(t, peer, tag)->wait(); }
  void recv(Tensor& t, int peer, int tag) { recv_async(t, peer, tag)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // Tests every outstanding request of this communicator once. (The MPI
  // backend advances every communicator of the process, as MPI's own progress
  // engine does; wait() does the same while it polls.)
  virtual void progress() = 0;
  // A sub-group of the ranks with the same color, ordered by key (MPI_Comm_split).
  // Collective over this communicator; a negative color joins no group (nullptr).
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  virtual const Options& options() const = 0;
  virtual void set_options(const Options& o) = 0;
  virtual OpStats stats(OpKind kind) const = 0;
  virtual void reset_stats() = 0;
  virtual std::vector<OpRecord> recent_ops() const = 0;  // oldest first

  // Null: no tracing (the default). The tracer must outlive the operations
  // started while it was set.
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }
  Tracer* tracer() const { return tracer_; }

 protected:
  Tracer* tracer_ = nullptr;
};

}  // namespace kiri::comm
