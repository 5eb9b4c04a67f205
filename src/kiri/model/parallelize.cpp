#include "kiri/model/parallelize.h"

namespace kiri::model {

ParallelGPT::ParallelGPT(GPT<float>& model, parallel::Mesh& mesh, const ParallelOptions& options,
                         Allocator& allocator)
    : model_(model), mesh_(mesh), options_(options) {
  // 1. Activation checkpointing: a property of the blocks, independent of
  //    how the parameters are laid out.
  model_.set_activation_checkpointing(options.checkpoint_every);

  comm::Communicator& dp = mesh.dp();
  if (options.zero_stage == 0) {
    // 2a. Stage 0 = DDP: whole parameters and gradients in one flat store;
    //     bucketed all-reduce started from backward's grad-ready hook; the
    //     token embedding's gradient travels as rows (tokens, dx) so that the
    //     V x C matrix is reduced early, with the LM head's part, instead of
    //     at the very end of backward.
    store_ = std::make_unique<nn::ParameterStore>(model.parameters(), options.dtype, allocator);
    if (dp.size() > 1) {
      ddp_ =
          std::make_unique<parallel::DistributedDataParallel>(*store_, dp, options.ddp, allocator);
      model_.set_defer_token_embedding_grad(true);
      model_.set_grad_ready_hook(
          [this](const std::vector<nn::Parameter*>& ready) { ddp_->on_grads_ready(ready); });
    }
    return;
  }
  // 2b. Stages 1-3: units by the wrap policy, sharded over the shard group
  //     (the dp group, or with hybrid sharding blocks of shard_group_size
  //     consecutive dp ranks, replicated across the blocks).
  const int group = options.shard_group_size == 0 ? dp.size() : options.shard_group_size;
  KIRI_CHECK_KIND(kConfig, group >= 1 && dp.size() % group == 0,
                  "parallel.shard_group_size = ", group, " must divide parallel.dp = ", dp.size());
  comm::Communicator* shard = &dp;
  comm::Communicator* replicas = nullptr;
  if (group < dp.size()) {
    shard_group_ = dp.split(dp.rank() / group, dp.rank(), "dp_shard");
    replica_group_ = dp.split(dp.rank() % group, dp.rank(), "dp_replicate");
    shard = shard_group_.get();
    replicas = replica_group_.get();
  }
  parallel::ShardOptions so;
  so.stage = options.zero_stage;
  so.dtype = options.dtype;
  so.prefetch = options.prefetch;
  sharded_ = std::make_unique<parallel::ShardedDataParallel>(
      model.parameter_groups(), parallel::wrap_policy(model.num_groups(), options.wrap_blocks),
      *shard, replicas, so, allocator);
  auto* s = sharded_.get();
  model_.set_group_hooks({[s](int g) { s->before_forward(g); }, [s](int g) { s->after_forward(g); },
                          [s](int g) { s->before_backward(g); },
                          [s](int g) { s->after_backward(g); }});
}

ParallelGPT::~ParallelGPT() {
  model_.set_group_hooks({});
  model_.set_grad_ready_hook({});
}

std::vector<nn::ParameterSegment> ParallelGPT::optimizer_segments() {
  if (sharded_) return sharded_->segments();
  std::vector<nn::ParameterSegment> out;
  for (nn::Parameter* p : store_->parameters())
    out.push_back({p, 0, p->offset, store_->values().flat_range(p->offset, p->numel()),
                   store_->grads().flat_range(p->offset, p->numel())});
  return out;
}

int64_t ParallelGPT::optimizer_state_numel() const {
  return sharded_ ? sharded_->state_numel() : store_->numel();
}

comm::Communicator* ParallelGPT::norm_group() {
  return sharded_ ? &sharded_->shard_group() : nullptr;
}

std::function<void()> ParallelGPT::poller() {
  if (sharded_) return [this] { sharded_->progress(); };
  if (!ddp_) return {};
  return [this] { mesh_.dp().progress(); };
}

void ParallelGPT::synchronize_parameters() {
  if (ddp_) ddp_->broadcast_parameters();
  if (sharded_) sharded_->gather_parameters();
}

void ParallelGPT::zero_grad() {
  if (sharded_)
    sharded_->zero_grad();
  else
    store_->zero_grad();
}

void ParallelGPT::begin_micro_batch(bool last) {
  last_ = last;
  if (ddp_) ddp_->set_sync(last);
  if (sharded_) sharded_->set_sync(last);
}

void ParallelGPT::end_micro_batch() {
  if (sharded_) {
    // Stages 2 and 3 reduce every micro-batch: the next backward needs the
    // units' gradient buffers again, so wait for them here (as FSDP does at
    // the end of each backward). Stage 1 has nothing outstanding until the last.
    sharded_->finalize_grads();
    return;
  }
  if (!ddp_) return;
  if (!last_) {
    // Accumulating: this micro-batch's token-embedding rows stay local.
    model_.add_token_embedding_grad(model_.deferred_tokens(), model_.deferred_dx());
  } else {
    ddp_->finalize_grads({{&model_.wte(), model_.deferred_tokens(), model_.deferred_dx()}});
  }
  model_.clear_deferred();
}

void ParallelGPT::after_optimizer_step() {
  if (sharded_) sharded_->gather_parameters();
}

}  // namespace kiri::model
