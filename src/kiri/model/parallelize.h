#pragma once
// ParallelGPT: the one place where the cuts are applied to a built GPT, as a short ordered list
// (torchtitan's parallelize): apply_tp (tensor and sequence parallelism: the layers keep this
// rank's part of each parameter), apply_pp (the model arrives cut into this rank's chunks,
// make_gpt_chunks; the pipeline and the tied embedding's group), apply_ac (activation
// checkpointing), then apply_ddp (ZeRO stage 0: DDP over a ParameterStore) or apply_zero (the
// sharding engine: ZeRO stages 1-3 / FSDP, hybrid sharding). The model is built as shapes only,
// as torchtitan builds it on the meta device: its parameters are bound to memory by the last
// step, so the cuts before it may still change them. Every process group comes from
// ParallelDims (parallel/dims.h).
#include <functional>
#include <memory>

#include "kiri/config/layout.h"

#include "kiri/model/gpt.h"
#include "kiri/model/pipeline.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/parallel/dims.h"
#include "kiri/parallel/dp/ddp.h"
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
  bool sequence_parallel = false;  // with the dims' tp group (parallel.sequence_parallel)
  int checkpoint_every = 0;        // activation checkpointing of every k-th block; 0: none
  SelectiveRecompute selective;    // selective recomputation of every block (model/layers.h)
  PipelineOptions pipeline;        // schedule, micro-batches, virtual stages (pp > 1)
  // Stage 3, offload.parameters = nvme: the swap space of the parameter shards.
  offload::SwapSpace* param_swap = nullptr;
  // Stages 2-3, offload.gradients: the swap space of the reduced gradient shards.
  offload::SwapSpace* grad_swap = nullptr;
  // Called once the model is cut and before its states are allocated (the trainer refuses
  // there, naming the bytes, a layout whose states exceed train.mem_limit).
  std::function<void()> before_allocate;
};

// The tensors' dtype of the config's precision (train.dtype): fp32, bf16 or fp16.
DType dtype_of(Precision p);

// The options of a layout (RunConfig::parallel) and precision, in this one place: ZeRO stage
// (the strategy's) and shard group, DDP buckets, wrap_blocks, prefetch, dtype, checkpointing
// (every k-th block, or selective with the layout's recompute modules), the pipeline's
// schedule, micro-batches and virtual stages. The caller adds the swap spaces.
ParallelOptions parallel_options(const kiri::Layout& layout, Precision dtype);

// This rank's chunks of the model: the whole model without pipeline
// parallelism; else the chunks of its pipeline stage, the layers balanced
// by compute cost (embedding and LM head counted). Whole layers: ParallelGPT's apply_tp cuts
// them.
std::vector<std::unique_ptr<GPT<float>>> make_gpt_chunks(const GPTConfig& cfg, int pp, int stage,
                                                         const PipelineOptions& pipeline,
                                                         int64_t seq_len);

class ParallelGPT {
 public:
  ParallelGPT(std::vector<GPT<float>*> chunks, parallel::ParallelDims& dims,
              const ParallelOptions& options, Allocator& allocator);
  ParallelGPT(GPT<float>& model, parallel::ParallelDims& dims, const ParallelOptions& options,
              Allocator& allocator)
      : ParallelGPT(std::vector<GPT<float>*>{&model}, dims, options, allocator) {}
  ~ParallelGPT();

  // What the optimizer updates on this rank, and the size of its flat state.
  std::vector<nn::ParameterSegment> optimizer_segments();
  int64_t optimizer_state_numel() const;
  // Where each unit of that flat state starts (ascending, the first 0): the sharding
  // engine's units (their shards), or under stage 0 the model's parameter groups. The
  // offloaded optimizer keeps each unit in files of its own.
  std::vector<int64_t> optimizer_unit_starts() const;
  // Parameter offload: the swap file of each of those units' values (else empty).
  std::vector<int> optimizer_values_files() const;
  // Gradient offload: the swap file of each of those units' gradients (else empty).
  std::vector<int> optimizer_grads_files() const;
  // Where gradient norms are summed.
  std::vector<comm::Communicator*> norm_groups();
  // Every communicator the cuts communicate on, each once (ParallelDims::groups): world, dp, its
  // tp and pp groups when larger than one rank, and the tied embedding's and hybrid
  // sharding's groups when they exist (what a step's communication statistics sum over).
  std::vector<comm::Communicator*> communicators();

  // After the optimizer initialised or loaded its weights: makes the
  // parameters used in compute whole and equal on every rank (stage 0:
  // rank 0's are broadcast; stages 1 and 2: the shards are all-gathered).
  void synchronize_parameters();
  void zero_grad();
  // zero_grad() zeroes nothing but the gradients of optimizer_segments() (no sharding:
  // they are the whole store's), so an update that zeroes each gradient it reads
  // (AdamW::set_zero_grads) does zero_grad's work. Sharded, zero_grad also clears the
  // whole-gradient buffers and the gradient files, which no segment covers.
  bool segments_cover_zero_grad() const { return !sharded_; }
  // Forward and backward of this rank's rows of the batch (tokens, targets
  // [m * B, T], m = pipeline micro-batches), accumulating gradients; with
  // last = true (the last accumulation step) the gradients are then reduced
  // (all, or this rank's shard, summed over dp; the tied embedding summed
  // between the first and last pipeline stage). Returns the sum of the
  // token losses this rank computed (the last pipeline stage's).
  double forward_backward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                          double loss_weight, bool last);
  // Evaluation: the sum of the token losses of one batch [B, T] (on the last
  // pipeline stage; 0 on the others). ctx.training must be off.
  double forward_only(nn::Context& ctx, const Tensor& tokens, const Tensor& targets);
  // After the optimizer step: stages 1 and 2 all-gather the updated shards.
  void after_optimizer_step();

  // Overlap across steps (optimizer offload): after the optimizer began its step
  // (AdamW::begin_step) the update of each unit runs when this rank's next forward
  // first needs the unit (stage 3: first reads its shard, prefetches included):
  // update_through(end of the unit's optimizer state) for it and every unit before it,
  // in forward order, then the unit's gradients are zeroed and (stages 1, 2) its
  // parameters all-gathered. The forward of unit k so waits only for unit k's update;
  // the I/O of the later units runs under it. Every unit is forwarded before any
  // backward, so each gradient is zeroed after its update and before it accumulates.
  void defer_update(std::function<void(int64_t)> update_through, std::function<void()> finish);
  // Updates every unit not yet updated, then calls `finish` (before evaluation, a
  // checkpoint, the next optimizer step).
  void finish_update();
  // A deferred update has begun and finish_update has not run: zero_grad must not
  // (the units zero their own gradients once updated).
  bool update_pending() const { return update_pending_; }

  // What backward should call between operations (nn::Context::poll) so the
  // outstanding reductions progress; empty when there are none.
  std::function<void()> poller();

  // The pieces, for the trainer's pp == 1 path and tests.
  void begin_micro_batch(bool last);
  void end_micro_batch();

  GPT<float>& model() { return *chunks_.front(); }
  const std::vector<GPT<float>*>& chunks() const { return chunks_; }
  parallel::ParallelDims& dims() { return dims_; }
  int zero_stage() const { return options_.zero_stage; }
  const ParallelOptions& options() const { return options_; }
  nn::ParameterStore* store() { return store_.get(); }  // stage 0 only
  Pipeline* pipeline() { return pipeline_.get(); }      // pp > 1 or virtual stages only
  parallel::DistributedDataParallel* ddp() { return ddp_.get(); }
  parallel::ShardedDataParallel* sharded() { return sharded_.get(); }
  // The last pipeline stage's copy of the tied embedding (nullptr if none).
  nn::Parameter* tied_copy() { return tied_copy_; }

 private:
  // The cuts, applied by the constructor in this order.
  void apply_tp();
  void apply_pp();
  void apply_ac();
  void apply_ddp(Allocator& allocator);
  void apply_zero(Allocator& allocator);
  std::vector<nn::Parameter*> all_parameters() const;
  void sync_tied_embedding();
  // A unit of the deferred update: a sharding unit, or a parameter group under stage 0.
  struct UpdateUnit {
    int64_t state_end = 0;                 // of its optimizer state
    int sharded_unit = -1;                 // stages 1-3
    int64_t grad_begin = 0, grad_end = 0;  // stage 0: its range of the store's gradients
  };
  void build_update_units();
  void install_forward_hooks();
  void update_units_through(int unit);  // every update unit up to `unit`, in order

  std::vector<GPT<float>*> chunks_;
  parallel::ParallelDims& dims_;
  ParallelOptions options_;
  bool last_ = true;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  // DDP without tensor parallelism: the micro-batch's token-embedding gradient rows, which the
  // model hands over (GPT::set_token_grad_sink) instead of adding them into wte's gradient.
  Tensor token_rows_, token_dx_;                   // [N] I32, [N, C]
  comm::Communicator* embedding_group_ = nullptr;  // the dims' (tied head, pp > 1)
  std::unique_ptr<parallel::ShardedDataParallel> sharded_;
  std::unique_ptr<Pipeline> pipeline_;
  nn::Parameter* tied_wte_ = nullptr;             // this rank's wte when it is tied across stages
  nn::Parameter* tied_copy_ = nullptr;            // ... and it is the last stage's copy
  std::vector<UpdateUnit> update_units_;          // in forward order
  std::vector<std::vector<int>> update_unit_of_;  // [chunk][group]: index, -1 for none
  size_t updated_ = 0;                            // update_units_[0, updated_) are done
  bool update_pending_ = false;
  std::function<void(int64_t)> update_through_;
  std::function<void()> finish_update_;
};

}  // namespace kiri::model
