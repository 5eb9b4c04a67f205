#include "kiri/model/parallelize.h"

#include <algorithm>

#include "kiri/parallel/pp/partition.h"

namespace kiri::model {

namespace pp = parallel::pp;

std::vector<std::unique_ptr<GPT<float>>> make_gpt_chunks(const GPTConfig& cfg, int stages,
                                                         int stage, const PipelineOptions& pipeline,
                                                         int64_t seq_len, comm::Communicator* tp) {
  std::vector<std::unique_ptr<GPT<float>>> out;
  if (stages == 1 && pipeline.virtual_stages == 1) {
    out.push_back(std::make_unique<GPT<float>>(cfg, GPTPart{}, tp));
    return out;
  }
  const pp::LayerCosts costs =
      pp::gpt_layer_costs(cfg.n_embd, cfg.n_head, cfg.vocab_size, static_cast<int>(seq_len));
  const std::vector<pp::StageLayers> parts =
      pipeline.virtual_stages > 1
          ? pp::partition_chunks(cfg.n_layer, stages, pipeline.virtual_stages, costs)
          : pp::partition_layers(cfg.n_layer, stages, costs);
  for (size_t g = static_cast<size_t>(stage); g < parts.size(); g += static_cast<size_t>(stages)) {
    const pp::StageLayers& s = parts[g];
    out.push_back(std::make_unique<GPT<float>>(
        cfg, GPTPart{s.first_block, s.end_block, s.has_embedding, s.has_head}, tp));
  }
  return out;
}

ParallelGPT::ParallelGPT(std::vector<GPT<float>*> chunks, parallel::Mesh& mesh,
                         const ParallelOptions& options, Allocator& allocator)
    : chunks_(std::move(chunks)), mesh_(mesh), options_(options) {
  KIRI_CHECK(!chunks_.empty(), "ParallelGPT needs the model or this rank's chunks of it");
  // 1. Pipeline parallelism: the model arrives cut into this rank's chunks
  //    (make_gpt_chunks). The first and last stage each hold the tied
  //    embedding; their gradients are summed over the "embedding" group.
  const int stages = mesh.shape().pp;
  if (stages > 1) {
    KIRI_CHECK_KIND(kConfig, options.zero_stage <= 1, "parallel.zero_stage = ", options.zero_stage,
                    " with parallel.pp = ", stages,
                    ": pipeline parallelism composes with ZeRO stage 0 or 1 (stages 2 and 3 "
                    "reduce or gather per micro-batch, which the schedules interleave)");
    for (GPT<float>* c : chunks_)
      if (c->has_wte()) {
        tied_wte_ = &c->wte();
        if (!c->part().first) tied_copy_ = tied_wte_;
      }
    const bool end = mesh.pp_index() == 0 || mesh.pp_index() == stages - 1;
    embedding_group_ =
        mesh.world().split(end ? mesh.dp_index() * mesh.shape().tp + mesh.tp_index() : -1,
                           mesh.pp_index(), "embedding");
    pipeline_ = std::make_unique<Pipeline>(chunks_, mesh.pp(), options.pipeline);
  }
  // 2. Activation checkpointing: a property of the blocks, independent of
  //    how the parameters are laid out.
  for (GPT<float>* c : chunks_) c->set_activation_checkpointing(options.checkpoint_every);

  comm::Communicator& dp = mesh.dp();
  const bool whole = chunks_.size() == 1 && chunks_[0]->whole();
  const bool tensor_parallel = mesh.shape().tp > 1;
  KIRI_CHECK_KIND(kConfig, !options.param_swap || options.zero_stage == 3,
                  "offload.parameters = nvme needs ZeRO stage 3 (parallel.zero_stage = ",
                  options.zero_stage, ")");
  if (options.zero_stage == 0) {
    // 3a. Stage 0 = DDP: whole parameters and gradients in one flat store;
    //     bucketed all-reduce started from backward's grad-ready hook; the
    //     token embedding's gradient travels as rows (tokens, dx) so that the
    //     V x C matrix is reduced early, with the LM head's part, instead of
    //     at the very end of backward. Under pipeline parallelism the
    //     gradients are reduced after the whole pipeline step.
    store_ = std::make_unique<nn::ParameterStore>(all_parameters(), options.dtype, allocator);
    if (dp.size() > 1) {
      ddp_ =
          std::make_unique<parallel::DistributedDataParallel>(*store_, dp, options.ddp, allocator);
      if (whole) {
        // (Under tensor parallelism the rows of wte are split: no deferral.)
        model().set_defer_token_embedding_grad(!tensor_parallel);
        model().set_grad_ready_hook(
            [this](const std::vector<nn::Parameter*>& ready) { ddp_->on_grads_ready(ready); });
      }
    }
    return;
  }
  // 3b. Stages 1-3: units by the wrap policy, sharded over the shard group
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
  so.param_swap = options.param_swap;
  std::vector<std::vector<nn::Parameter*>> groups;
  for (GPT<float>* c : chunks_)
    for (auto& g : c->parameter_groups()) groups.push_back(std::move(g));
  std::vector<std::vector<int>> units;
  if (whole) {
    units = parallel::wrap_policy(model().num_groups(), options.wrap_blocks);
  } else {  // stage 1 under pipeline parallelism: one unit per group, reduced after the step
    for (int g = 0; g < static_cast<int>(groups.size()); ++g) units.push_back({g});
  }
  sharded_ = std::make_unique<parallel::ShardedDataParallel>(std::move(groups), std::move(units),
                                                             *shard, replicas, so, allocator);
  if (whole) {
    auto* s = sharded_.get();
    model().set_group_hooks(
        {[s](int g) { s->before_forward(g); }, [s](int g) { s->after_forward(g); },
         [s](int g) { s->before_backward(g); }, [s](int g) { s->after_backward(g); }});
  }
}

ParallelGPT::~ParallelGPT() {
  for (GPT<float>* c : chunks_) {
    c->set_group_hooks({});
    c->set_grad_ready_hook({});
  }
}

std::vector<nn::Parameter*> ParallelGPT::all_parameters() const {
  std::vector<nn::Parameter*> out;
  for (GPT<float>* c : chunks_)
    for (nn::Parameter* p : c->parameters()) out.push_back(p);
  return out;
}

std::vector<nn::ParameterSegment> ParallelGPT::optimizer_segments() {
  std::vector<nn::ParameterSegment> out;
  if (sharded_) {
    out = sharded_->segments();
  } else {
    for (nn::Parameter* p : store_->parameters())
      out.push_back({p, 0, p->offset, store_->values().flat_range(p->offset, p->numel()),
                     store_->grads().flat_range(p->offset, p->numel())});
  }
  // Every element counted once in the global norm: not the last stage's copy
  // of the tied embedding, and parameters replicated over tensor-parallel
  // ranks only on the first of them.
  for (nn::ParameterSegment& s : out)
    s.counted_in_norm = s.param != tied_copy_ && (s.param->tp.dim >= 0 || mesh_.tp_index() == 0);
  return out;
}

int64_t ParallelGPT::optimizer_state_numel() const {
  return sharded_ ? sharded_->state_numel() : store_->numel();
}

std::vector<int64_t> ParallelGPT::optimizer_unit_starts() const {
  std::vector<int64_t> out;
  if (sharded_) {
    for (const parallel::ShardUnit& u : sharded_->units()) out.push_back(u.shard_offset);
  } else {
    for (GPT<float>* c : chunks_)
      for (const auto& g : c->parameter_groups())
        if (!g.empty()) out.push_back(g.front()->offset);
    std::sort(out.begin(), out.end());
  }
  if (out.empty() || out.front() != 0) out.insert(out.begin(), 0);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> ParallelGPT::optimizer_values_files() const {
  return sharded_ ? sharded_->param_files() : std::vector<int>{};
}

std::vector<comm::Communicator*> ParallelGPT::norm_groups() {
  std::vector<comm::Communicator*> out;
  if (sharded_) out.push_back(&sharded_->shard_group());
  if (mesh_.shape().pp > 1) out.push_back(&mesh_.pp());
  if (mesh_.shape().tp > 1) out.push_back(&mesh_.tp());
  return out;
}

std::function<void()> ParallelGPT::poller() {
  if (sharded_) return [this] { sharded_->progress(); };
  if (!ddp_ && !pipeline_) return {};
  return [this] { mesh_.world().progress(); };
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
  if (!model().deferred_tokens().defined()) {  // nothing deferred (tensor parallelism)
    if (last_) ddp_->finalize_grads({});
    return;
  }
  if (!last_) {
    // Accumulating: this micro-batch's token-embedding rows stay local.
    model().add_token_embedding_grad(model().deferred_tokens(), model().deferred_dx());
  } else {
    ddp_->finalize_grads({{&model().wte(), model().deferred_tokens(), model().deferred_dx()}});
  }
  model().clear_deferred();
}

void ParallelGPT::sync_tied_embedding() {
  if (!embedding_group_ || embedding_group_->size() < 2 || !tied_wte_) return;
  Tensor g = tied_wte_->grad.view({tied_wte_->numel()});
  embedding_group_->all_reduce(g, comm::ReduceOp::kSum);
}

double ParallelGPT::forward_backward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                                     double loss_weight, bool last) {
  const int m = options_.pipeline.microbatches;
  if (!pipeline_) {  // one stage: the micro-batches run one after another
    const int64_t b = tokens.dim(0) / m, t = tokens.dim(1);
    double loss = 0;
    for (int i = 0; i < m; ++i) {
      begin_micro_batch(last && i == m - 1);
      const Tensor x = tokens.flat_range(i * b * t, b * t).view({b, t});
      const Tensor y = targets.flat_range(i * b * t, b * t).view({b, t});
      // With a tracer on the world communicator: compute-lane spans.
      {
        Tracer::Span span(mesh_.world().tracer(), "forward", "compute");
        loss += model().forward(ctx, x, y, loss_weight);
      }
      {
        Tracer::Span span(mesh_.world().tracer(), "backward", "compute");
        model().backward(ctx);
      }
      end_micro_batch();
    }
    return loss;
  }
  // Pipeline: gradients accumulate over the schedule; they are reduced
  // after it (the tied embedding first, between the first and last stage).
  if (ddp_) ddp_->set_sync(false);
  if (sharded_) sharded_->set_sync(false);
  const double loss = pipeline_->run(ctx, tokens, targets, loss_weight);
  if (last) {
    sync_tied_embedding();
    if (ddp_) {
      ddp_->set_sync(true);
      ddp_->finalize_grads({});
    }
    if (sharded_) sharded_->reduce_gradients();
  }
  return loss;
}

double ParallelGPT::forward_only(nn::Context& ctx, const Tensor& tokens, const Tensor& targets) {
  if (pipeline_) return pipeline_->forward_only(ctx, tokens, targets);
  return model().forward(ctx, tokens, targets, 0.0);
}

void ParallelGPT::after_optimizer_step() {
  if (sharded_) sharded_->gather_parameters();
}

}  // namespace kiri::model
