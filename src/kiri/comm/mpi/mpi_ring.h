#pragma once
// kiri's own ring all-reduce over non-blocking point-to-point, for large
// F32/F64 tensors (and its halves, reduce-scatter and all-gather, for groups whose ring
// crosses hosts: docs/comm.md, "Groups across hosts"). Open MPI's libnbc MPI_Iallreduce advances
// one round per poll through its own pipeline and is ~2.5x slower than the blocking call here
// (docs/comm.md); large point-to-point messages between processes of one node take the single-copy
// (CMA) path instead. Reduce-scatter then all-gather over the group's ring, 2(N-1) steps of one
// chunk_range chunk each; a step's receive is reduced into the tensor when a poll sees it complete,
// then the next step is posted. Every chunk is summed in the same ring order on every run, and each
// reduced chunk is copied (not recomputed) to the other ranks: bitwise the same result everywhere,
// run after run.
#include <memory>
#include <vector>

#include "kiri/comm/mpi/mpi_handles.h"
#include "kiri/tensor/allocator.h"

namespace kiri::comm::detail {

// acc[i] = op(acc[i], b[i]) over n elements of F32 or F64, or of BF16/F16 in f32 arithmetic
// rounded back (kAvg sums; the caller divides).
void combine(void* acc, const void* b, int64_t n, DType dtype, ReduceOp op);

// A scratch buffer, uninitialised, from `memory` (Options::scratch_memory: category buffers,
// counted in the rank's memory) or else from the process's pool, and back there when
// destroyed: a fresh allocation per collective is fresh pages (faults; zeroed, for a
// std::vector), which cost as much as the reduction; both keep freed blocks for the next.
// Destroyed only once MPI is done with it (a failed transfer's work is kept alive for good).
class PooledScratch {
 public:
  PooledScratch(int64_t bytes, std::shared_ptr<AllocatorCore> memory);
  ~PooledScratch();
  PooledScratch(const PooledScratch&) = delete;
  PooledScratch& operator=(const PooledScratch&) = delete;
  char* data() const { return data_; }
  // The buffer stays allocated for good: MPI may still write it (a failed transfer).
  void leak() { data_ = nullptr; }

 private:
  int64_t bytes_ = 0;
  std::shared_ptr<AllocatorCore> memory_;
  char* data_ = nullptr;
};

// Which collective a Ring runs: all of it, its reduce-scatter half (rank r ends with chunk r
// of the sum), or an all-gather (rank r starts with chunk r).
enum class RingKind { kAllReduce, kReduceScatter, kAllGather };

class Ring {
 public:
  // data: count elements of dtype, worked on in place: reduced with op (kAllReduce,
  // kReduceScatter: F32 or F64 only, BF16/F16 never take the ring, they reduce in f32
  // through MPI's user ops; kAvg travels as a sum, the caller divides), or filled chunk by
  // chunk (kAllGather). Messages go over `comm` with `tag`, which must not be shared with any
  // other operation in flight. Each chunk travels in messages of at most piece_bytes.
  // The incoming chunk's scratch comes from `memory` (PooledScratch).
  Ring(RingKind kind, void* data, int64_t count, DType dtype, ReduceOp op, MPI_Comm comm, int tag,
       int64_t piece_bytes, std::shared_ptr<AllocatorCore> memory);
  ~Ring();
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  // Posts the first step; an MPI error code.
  int start();
  // Tests the current step once; reduces and posts the next step when it
  // completed. True when the whole collective is done. `rc` gets the first
  // failing MPI call's code and name (the caller raises).
  bool advance(int& rc, const char*& call);
  // Whether every posted request completed (no buffer is in MPI's hands).
  bool idle() const;

 private:
  int post(int step);
  void reduce(int64_t begin, int64_t n) const;

  char* data_;
  int64_t count_;
  DType dtype_;
  ReduceOp op_;
  MPI_Comm comm_;
  int tag_, rank_ = 0, size_ = 1;
  int64_t piece_;  // elements per message
  // Steps [first_, last_): 0 .. N-2 reduce-scatter, N-1 .. 2N-3 all-gather. The chunk a
  // reduce-scatter step sends is rank - step - scatter_shift_, an all-gather step's
  // rank + gather_shift_ - (step - (N-1)) (module comment).
  int first_ = 0, last_ = 0, scatter_shift_ = 0, gather_shift_ = 1;
  int step_ = -1;  // the step in flight; last_: done
  // A reduce-scatter step's incoming chunk; left uninitialised (the largest
  // chunk, allocated once).
  std::shared_ptr<AllocatorCore> memory_;
  std::unique_ptr<PooledScratch> scratch_;
  int64_t scratch_elems_ = 0;
  // The pieces of the step in flight: receive and send requests, and which
  // received pieces are reduced already.
  std::vector<MPI_Request> recvs_, sends_;
  std::vector<char> reduced_;
  int64_t recv_begin_ = 0;  // element offset of the incoming chunk
};

// Two ranks on two hosts (MpiCore::pair_across_hosts, docs/comm.md "Two ranks on two hosts"):
// one exchange with the other rank, `send_bytes` out and `recv_bytes` in, each cut into
// messages of at most piece_bytes (under Open MPI's TCP eager limit, so that neither
// direction waits for a rendezvous reply queued behind the other's data). all_gather and
// reduce_scatter of a pair are one such exchange; the caller places or reduces what came.
class PairExchange {
 public:
  PairExchange(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes, MPI_Comm comm,
               int peer, int tag, int64_t piece_bytes);
  ~PairExchange();
  PairExchange(const PairExchange&) = delete;
  PairExchange& operator=(const PairExchange&) = delete;

  // Posts every piece; an MPI error code.
  int start();
  // True when every piece has gone and come (`rc`, `call`: the first failing MPI call).
  bool advance(int& rc, const char*& call);
  bool idle() const;

 private:
  const char* send_;
  char* recv_;
  int64_t send_bytes_, recv_bytes_, piece_;
  MPI_Comm comm_;
  int peer_, tag_;
  std::vector<MPI_Request> requests_;
};

}  // namespace kiri::comm::detail
