#pragma once
// ZeRO stages 1-3 (= FSDP's SHARD_GRAD_OP and FULL_SHARD) as one engine.
//
// The model's parameter groups are cut into units by a wrap policy (whole
// groups, in forward order). Each unit is one flat buffer of its parameters,
// padded at the end to `padded` = a multiple of the shard group's size N, so
// rank r owns elements [r * shard, (r + 1) * shard) of every unit. What a
// rank keeps, with d bytes per compute element (dtype) and P = the padded
// sum over units:
//
//   stage | parameters (d)      | gradients (d)       | optimizer (elsewhere)
//   1     | all: P              | all: P              | its shards: P / N
//   2     | all: P              | its shards: P / N   | its shards: P / N
//   3     | its shards: P / N   | its shards: P / N   | its shards: P / N
//
// Stage 1 reduce-scatters the gradients during the last micro-batch's
// backward (unit by unit, as backward finishes each); stage 2 does the same
// every micro-batch and keeps a unit's full gradient (category buffers)
// only until its reduce-scatter completes. At most kMaxInflightReductions
// are outstanding, and none outlives the backward: the peak does not depend
// on how far a peer lags. Stage 3 also all-gathers a
// unit's parameters (category buffers) just before its forward and again
// before its backward and frees them after each, prefetching the next
// unit's all-gather so it overlaps the current unit's compute. After the
// optimizer updates the shards, stages 1 and 2 all-gather the parameters.
//
// Per step that moves, per rank, (N-1)/N * d * P for each reduce-scatter and
// all-gather: stage 1 and 2 the bytes of DDP's all-reduce, stage 3 1.5x.
// Hybrid sharding (FSDP's HYBRID_SHARD) shards over `shard_group` and, after
// each reduce-scatter, all-reduces the shard over `replica_group`.
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "kiri/base/engine_limits.h"
#include "kiri/comm/communicator.h"
#include "kiri/nn/parameter.h"
#include "kiri/offload/swap_space.h"

namespace kiri::parallel {

// The reductions and gradient writes a rank keeps in flight (kMaxInflightReductions,
// kMaxInflightGradWrites) are in base/engine_limits.h, where the planner reads them too.

struct ShardOptions {
  int stage = 3;              // 1, 2 or 3
  DType dtype = DType::kF32;  // of the parameters and gradients used in compute
  bool prefetch = true;       // stage 3: start the next unit's all-gather early
  // Stage 3, ZeRO-Infinity: each unit's parameter shard lives in a swap file here
  // (unit<KKKKK>.params.swp, category parameters on the NVMe tier) instead of memory.
  // It is read into a staging buffer one unit ahead of its all-gather (with
  // prefetch: two ahead of its use), in forward and in backward; the optimizer
  // writes the updated shard back (optim::StateOffload::values_files).
  offload::SwapSpace* param_swap = nullptr;
  // Stages 2 and 3, gradient offload: each unit's reduced gradient shard lives in a swap
  // file here (unit<KKKKK>.grads.swp, category gradients on the NVMe tier), written as
  // soon as the unit's reduction completes, and only a unit being accumulated holds a
  // [shard] buffer in RAM. With gradient accumulation a later micro-batch reads the
  // partial sum back (prefetched when the unit's backward begins) and adds to it; the
  // last micro-batch's sum of squares per segment is kept for the global norm. The
  // optimizer reads the files with its states (optim::StateOffload::grads_files).
  offload::SwapSpace* grad_swap = nullptr;
  // Whether unit 0 (the embedding) is also the LM head: backward then starts
  // with it and runs from the last unit down to unit 1; untied, backward runs
  // from the last unit down to unit 0 (the order stage 3 prefetches in).
  bool tied_head = true;
};

struct ShardUnit {
  std::vector<int> groups;             // the model's parameter groups, in order
  std::vector<nn::Parameter*> params;  // theirs, in order
  std::vector<int64_t> param_offsets;  // of each in the unit's flat buffer
  int64_t numel = 0;                   // sum of the parameters' sizes
  int64_t padded = 0;                  // numel rounded up to a multiple of N
  int64_t shard = 0;                   // padded / N: what each rank owns
  int64_t full_offset = 0;             // of the unit in full (padded) buffers
  int64_t shard_offset = 0;            // of the rank's shard in shard buffers and states
};

// Groups of consecutive model groups: the embeddings (group 0) alone, every
// `blocks_per_unit` blocks (groups 1..n_layer) together, the final group alone.
std::vector<std::vector<int>> wrap_policy(int num_groups, int blocks_per_unit);

class ShardedDataParallel {
 public:
  // groups: the model's parameter groups in forward order; units: the wrap
  // policy (every group in exactly one unit, consecutive).
  ShardedDataParallel(std::vector<std::vector<nn::Parameter*>> groups,
                      std::vector<std::vector<int>> units, comm::Communicator& shard_group,
                      comm::Communicator* replica_group, const ShardOptions& options,
                      Allocator& allocator);
  ~ShardedDataParallel();

  // This rank's shard as optimizer segments (one per piece of a parameter),
  // with state offsets into a flat state of state_numel() elements.
  const std::vector<nn::ParameterSegment>& segments() const { return segments_; }
  int64_t state_numel() const { return state_numel_; }
  const std::vector<ShardUnit>& units() const { return units_; }
  comm::Communicator& shard_group() { return shard_group_; }
  const ShardOptions& options() const { return options_; }

  // The model's group hooks (GPT::GroupHooks).
  void before_forward(int group);
  void after_forward(int group);
  void before_backward(int group);
  void after_backward(int group);

  // Whether the coming backward ends the accumulation (stage 1 reduces
  // only then; stages 2 and 3 reduce every micro-batch).
  void set_sync(bool sync) { sync_ = sync; }
  void zero_grad();
  // Waits for every outstanding reduction; after it each rank's gradient
  // shard holds the sum over the data-parallel ranks.
  void finalize_grads();
  // Stage 1 without the model's hooks (pipeline parallelism): reduces every
  // unit's gradient now and waits.
  void reduce_gradients();
  // Stages 1 and 2: all-gathers the updated shards into the full parameters.
  void gather_parameters();
  // ... of one unit (a deferred update gathers each unit when the forward needs it).
  void gather_unit_parameters(int unit);
  // Zeroes one unit's gradients (its full buffer at stage 1, its shard at stages 2-3).
  void zero_unit_grad(int unit);
  int unit_of_group(int group) const { return unit_of_group_.at(group); }
  // Stage 3: called with a unit before its shard is first read for a forward (read from
  // swap or all-gathered, prefetches included), so that a deferred update of that unit
  // can complete first.
  void set_before_read(std::function<void(int unit)> fn) { before_read_ = std::move(fn); }
  // Advances outstanding collectives (MPI progresses only when polled).
  void progress();

  // Parameter offload: the swap file of each unit's shard (param_swap's ids, by unit).
  const std::vector<int>& param_files() const { return param_files_; }
  // Gradient offload: the swap file of each unit's reduced gradient (grad_swap's ids).
  const std::vector<int>& grad_files() const { return grad_files_; }

  // All-gathers a unit's [shard] tensor (this rank's part, F32) into [padded].
  void all_gather_unit(int unit, const Tensor& shard, Tensor& full);

 private:
  int64_t build_units(const std::vector<std::vector<nn::Parameter*>>& groups,
                      const std::vector<std::vector<int>>& units);
  void allocate_state(int64_t full_total);
  void build_segments();

  struct Runtime;
  void read_shard(int unit);          // parameter offload: starts reading a unit's shard
  void gather(int unit);              // starts the all-gather of a unit's parameters (stage 3)
  void wait_gathered(int unit);       // ...and binds them
  void release(int unit);             // frees a unit's gathered parameters (stage 3)
  void start_reduce(int unit);        // reduce-scatter of a unit's gradient
  void complete_reduces(bool block);  // finishes the reductions done (block: all)
  void wait_oldest();                 // finishes the oldest reduction, waiting for it
  // Advances one unit's reduction; true once its shard is added. in_order: every
  // older unit has started its replicas' all-reduce (hybrid); cleared when this has not.
  bool advance_reduce(int unit, bool block, bool& in_order);
  void finish_reduce(int unit);  // adds (stage 1: copies) the reduced shard
  void bind_grads(int unit);     // stage 2/3: a fresh full gradient buffer for backward
  int next_unit(int unit, bool backward) const;
  // Gradient offload (grad_swap).
  Tensor grad_buffer(int unit);             // [shard] page-aligned, for O_DIRECT
  void prefetch_grad(int unit);             // starts reading the unit's partial sum back
  Tensor take_grad_accumulator(int unit);   // the partial sum, or zeros when there is none
  void offload_grad(int unit, Tensor acc);  // the unit's norm part (last), then its write
  void retire_grad_io(bool block);          // frees the buffers whose writes landed
  void retire_grad_write(int unit);         // waits for the unit's write, frees its buffer
  void drop_unit_grad(int unit);            // zero_grad: the file holds nothing of this step

  std::vector<ShardUnit> units_;
  std::vector<int> unit_of_group_;
  comm::Communicator& shard_group_;
  comm::Communicator* replica_group_;
  ShardOptions options_;
  Allocator& allocator_;
  bool sync_ = true;
  int64_t state_numel_ = 0;
  Tensor params_full_, params_shard_, grads_full_, grads_shard_;
  std::vector<nn::ParameterSegment> segments_;
  std::vector<int> param_files_;
  std::vector<int> grad_files_;
  std::vector<double> grad_sq_;  // [segments] sums of squares of offloaded gradients
  std::vector<std::pair<size_t, size_t>> unit_segments_;  // [unit] its segments [first, end)
  std::vector<Runtime> runtime_;
  std::deque<int> order_;        // units whose reduction is outstanding, oldest first
  std::deque<int> grad_writes_;  // units whose gradient write is in flight, oldest first
  std::function<void(int)> before_read_;
};

}  // namespace kiri::parallel
