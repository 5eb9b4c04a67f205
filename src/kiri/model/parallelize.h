#pragma once
// ParallelGPT: the one place where the cuts are applied to a GPT, in a fixed
// order (see the constructor). Today: activation checkpointing, then either
// data parallelism (ZeRO stage 0: DDP over a ParameterStore) or the sharding
// engine (ZeRO stages 1-3 / FSDP, hybrid sharding). Tensor and pipeline
// parallelism join here, each in its place in that order.
#include <memory>

#include "kiri/model/gpt.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/parallel/dp/ddp.h"
#include "kiri/parallel/mesh.h"
#include "kiri/parallel/shard/sharded.h"

namespace kiri::model {

struct ParallelOptions {
  parallel::DdpOptions ddp;
  // 0: DDP (every rank holds everything); 1: optimizer states sharded;
  // 2: + gradients; 3: + parameters (FSDP FULL_SHARD).
  int zero_stage = 0;
  // Ranks that share one sharded copy; 0 = the whole dp group. Smaller
  // (dividing dp): hybrid sharding, replicas across the groups.
  int shard_group_size = 0;
  int wrap_blocks = 1;        // transformer blocks per sharding unit
  bool prefetch = true;       // stage 3: all-gather the next unit early
  DType dtype = DType::kF32;  // parameters and gradients in compute (bf16/fp16: mixed precision)
  int checkpoint_every = 0;   // activation checkpointing of every k-th block; 0: none
};

class ParallelGPT {
 public:
  ParallelGPT(GPT<float>& model, parallel::Mesh& mesh, const ParallelOptions& options,
              Allocator& allocator);
  ~ParallelGPT();

  // What the optimizer updates on this rank, and the size of its flat state.
  std::vector<nn::ParameterSegment> optimizer_segments();
  int64_t optimizer_state_numel() const;
  // Where gradient norms are summed (the shard group), or nullptr.
  comm::Communicator* norm_group();

  // After the optimizer initialised or loaded its weights: makes the
  // parameters used in compute whole and equal on every rank (stage 0:
  // rank 0's are broadcast; stages 1 and 2: the shards are all-gathered).
  void synchronize_parameters();
  void zero_grad();
  // Before each micro-batch's forward: only the last one reduces gradients
  // (stages 0 and 1; stages 2 and 3 reduce every micro-batch).
  void begin_micro_batch(bool last);
  // After each micro-batch's backward. After the last one every rank holds
  // its gradients (all, or its shard) summed over the dp group.
  void end_micro_batch();
  // After the optimizer step: stages 1 and 2 all-gather the updated shards.
  void after_optimizer_step();

  // What backward should call between operations (nn::Context::poll) so the
  // outstanding reductions progress; empty when there are none.
  std::function<void()> poller();

  GPT<float>& model() { return model_; }
  int zero_stage() const { return options_.zero_stage; }
  const ParallelOptions& options() const { return options_; }
  nn::ParameterStore* store() { return store_.get(); }  // stage 0 only
  parallel::DistributedDataParallel* ddp() { return ddp_.get(); }
  parallel::ShardedDataParallel* sharded() { return sharded_.get(); }

 private:
  GPT<float>& model_;
  parallel::Mesh& mesh_;
  ParallelOptions options_;
  bool last_ = true;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<comm::Communicator> shard_group_, replica_group_;
  std::unique_ptr<parallel::ShardedDataParallel> sharded_;
};

}  // namespace kiri::model
