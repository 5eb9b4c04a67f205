#pragma once
// The optimizer's flat fp32 states (master weights, Adam m and v) on their tier:
// tensors in memory, or swap files on NVMe (ZeRO-Offload; offload/swap_space.h).
//
// Offloaded, the state space [0, numel) is cut into units (the sharding
// engine's units, or the parameter groups without sharding) and each unit's
// states are files of their own, named stably: unit<KKKKK>.<state>.swp. A pass
// over the states (for_each_chunk) streams them in chunks of at most
// buffer_bytes / (4 x states) elements, a multiple of the block, never across
// a unit: with buffer_count staging buffers, chunk c + 1 .. c + buffer_count - 2
// are read and chunk c - 1 written while fn runs on chunk c (DeepSpeed's
// pipelined swapper). In memory, one chunk is the whole state.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiri/offload/swap_space.h"
#include "kiri/tensor/tensor.h"

namespace kiri::optim {

// kValues: the parameters' own values (compute dtype) when they are offloaded too
// (ZeRO-Infinity): the sharding engine's files, which the optimizer streams with its
// states and the engine reads ahead of each all-gather. kGrads: the reduced gradient
// shards (compute dtype) when the gradients are offloaded: the engine's files too,
// written as each unit's reduction completes, only read by the optimizer.
enum class State { kMaster, kExpAvg, kExpAvgSq, kValues, kGrads };
constexpr int kNumStates = 5;
// "master", "exp_avg", "exp_avg_sq", "values", "grads"
const char* state_name(State s);
constexpr unsigned state_bit(State s) {
  return 1u << static_cast<int>(s);
}
// The states the optimizer writes: every state but the gradients.
constexpr unsigned kAllStates = 0xF;

struct StateOffload {
  offload::SwapSpace* swap = nullptr;  // null: the states are tensors in memory
  // Where each unit starts in the flat state: ascending, the first 0.
  std::vector<int64_t> unit_starts;
  int buffer_count = 4;
  int64_t buffer_bytes = int64_t{64} << 20;
  // Parameter offload: each unit's file of values (of values_dtype) in `swap`, one per
  // unit_starts entry; empty: the values are in memory.
  std::vector<int> values_files;
  DType values_dtype = DType::kF32;
  // Gradient offload: each unit's file of its reduced gradient (of grads_dtype), one per
  // unit_starts entry; empty: the gradients are in memory.
  std::vector<int> grads_files;
  DType grads_dtype = DType::kF32;
};

class StateStore {
 public:
  // States master (when `master`), m and v of `numel` elements each, zero; the values
  // too when offload.values_files is given (the engine's files, kept as they are).
  StateStore(int64_t numel, bool master, const StateOffload& offload, Allocator& allocator);
  ~StateStore();

  int64_t numel() const { return numel_; }
  bool has(State s) const {
    if (s == State::kMaster) return master_;
    if (s == State::kValues) return values_;
    if (s == State::kGrads) return grads_;
    return true;
  }
  bool offloaded() const { return swap_ != nullptr; }
  Tensor& tensor(State s);  // in memory only

  // One chunk: elements [begin, end) of the flat state, each state's values in
  // memory (undefined for a state it does not have; kValues, kGrads in memory: undefined).
  struct Chunk {
    int64_t begin = 0, end = 0;
    Tensor state[kNumStates];
  };
  // Every chunk in order: the states in `read` (bits of state_bit) read from swap (the
  // others start zero), fn(chunk), the states in `write` written back. Returns after
  // every write is done; an I/O or checksum error is kIo after the outstanding
  // transfers have finished.
  void for_each_chunk(unsigned read, unsigned write, const std::function<void(Chunk&)>& fn);

  // The same pass in pieces, so that the caller's own work runs while its I/O is in
  // flight (the optimizer's update under the next forward). begin_pass starts the first
  // reads; advance_pass(end) runs fn on every chunk that begins before state element
  // `end` and returns with the next chunks' reads (and, unless wait_writes, the last
  // chunks' writes) still in flight, after also running (when run_ready) any later chunk
  // whose reads have landed (ahead of need, never blocking: between two calls the disk
  // works on as many chunks as there are buffers); finish_pass runs the rest and waits for every
  // write. One pass at a time; read() and write() of an offloaded store wait for it to
  // finish. An error ends the pass (its transfers drained) and propagates.
  void begin_pass(unsigned read, unsigned write, std::function<void(Chunk&)> fn);
  void advance_pass(int64_t end, bool wait_writes, bool run_ready = true);
  void finish_pass();
  bool pass_active() const { return pass_ != nullptr; }

  // Elements [offset, offset + dst.numel()) of a state, any tier.
  void read(State s, int64_t offset, Tensor& dst);
  void write(State s, int64_t offset, const Tensor& src);

  // Bytes moved to and from swap since construction (0 in memory).
  int64_t bytes_read() const;
  int64_t bytes_written() const;

 private:
  struct Unit {
    int64_t begin, end;
    int file[kNumStates] = {-1, -1, -1, -1, -1};
  };
  struct Slot;
  struct Pass;
  Tensor slot_view(size_t slot, int s, int64_t n);
  void finish_slot(Slot& slot);
  bool slot_ready(const Slot& slot) const;  // its transfers are done
  size_t retire_oldest_write();             // waits for it; returns its slot, now free
  // Starts the reads of the chunks up to buffer_count - 2 past `chunk`; a slot still
  // writing is waited for when `block`, else the reads stop there (returns false).
  bool start_reads(int64_t chunk, bool block);
  void run_chunk(int64_t chunk, bool block);
  void run_ready_chunks();
  void abort_pass();
  DType dtype_of(int s) const {
    return s == static_cast<int>(State::kValues)  ? values_dtype_
           : s == static_cast<int>(State::kGrads) ? grads_dtype_
                                                  : DType::kF32;
  }
  int64_t elem_size(int s) const { return static_cast<int64_t>(dtype_size(dtype_of(s))); }
  void transfer_range(State s, int64_t offset, Tensor& data, bool write);

  int64_t numel_;
  bool master_;
  bool values_ = false;
  DType values_dtype_ = DType::kF32;
  bool grads_ = false;
  DType grads_dtype_ = DType::kF32;
  std::vector<int> states_;  // the states this store has, in order
  offload::SwapSpace* swap_;
  Allocator& allocator_;
  Tensor mem_[kNumStates];  // in memory
  std::vector<Unit> units_;
  int64_t chunk_elems_ = 0;
  int64_t region_offset_[kNumStates] = {};  // of each state's region in a staging buffer
  std::unique_ptr<Pass> pass_;              // the pass in progress, if any
  std::vector<Tensor> pool_;  // [buffer_count] staging buffers (bytes as U8 ... F32), kBuffers
};

}  // namespace kiri::optim
