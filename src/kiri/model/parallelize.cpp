#include "kiri/model/parallelize.h"

#include <algorithm>
#include <limits>

#include "kiri/parallel/pp/partition.h"

namespace kiri::model {

namespace pp = parallel::pp;

std::vector<std::unique_ptr<GPT<float>>> make_gpt_chunks(const GPTConfig& cfg, int stages,
                                                         int stage, const PipelineOptions& pipeline,
                                                         int64_t seq_len) {
  std::vector<std::unique_ptr<GPT<float>>> out;
  if (stages == 1 && pipeline.virtual_stages == 1) {
    out.push_back(std::make_unique<GPT<float>>(cfg, GPTPart{}));
    return out;
  }
  const int seq = static_cast<int>(seq_len);
  const pp::LayerCosts costs =
      cfg.llama() ? pp::llama_layer_costs(cfg.n_embd, cfg.n_head, cfg.kv_heads(),
                                          static_cast<int>(cfg.mlp_width()), cfg.vocab_size, seq)
                  : pp::gpt_layer_costs(cfg.n_embd, cfg.n_head, cfg.vocab_size, seq);
  const std::vector<pp::StageLayers> parts =
      pipeline.virtual_stages > 1
          ? pp::partition_chunks(cfg.n_layer, stages, pipeline.virtual_stages, costs)
          : pp::partition_layers(cfg.n_layer, stages, costs);
  for (size_t g = static_cast<size_t>(stage); g < parts.size(); g += static_cast<size_t>(stages)) {
    const pp::StageLayers& s = parts[g];
    out.push_back(std::make_unique<GPT<float>>(
        cfg, GPTPart{s.first_block, s.end_block, s.has_embedding, s.has_head}));
  }
  return out;
}

DType dtype_of(Precision p) {
  return p == Precision::kBf16 ? DType::kBF16 : p == Precision::kFp16 ? DType::kF16 : DType::kF32;
}

ParallelOptions parallel_options(const kiri::Layout& l, Precision dtype) {
  ParallelOptions o;
  o.zero_stage = l.stage();
  o.shard_group_size = l.shard_group_size;
  o.ddp.bucket_bytes = static_cast<int64_t>(l.bucket_mb * 1024 * 1024);
  o.wrap_blocks = l.wrap_blocks;
  o.prefetch = l.prefetch;
  o.dtype = dtype_of(dtype);
  o.sequence_parallel = l.sequence_parallel;
  o.checkpoint_every = l.checkpoint_every();
  o.selective = l.recompute();  // selective: the layout's modules (none otherwise)
  o.pipeline.schedule = l.schedule;
  o.pipeline.microbatches = l.microbatches;
  o.pipeline.virtual_stages = l.virtual_stages;
  return o;
}

namespace {
// The layout these options and this mesh cut: ParallelGPT checks it with the layout's rules
// (a swap space exists only with the optimizer's states offloaded).
kiri::Layout options_layout(const ParallelOptions& o, const parallel::MeshShape& s) {
  kiri::Layout l;
  l.dp = s.dp;
  l.tp = s.tp;
  l.pp = s.pp;
  l.zero_stage = o.zero_stage;
  l.shard_group_size = o.shard_group_size;
  l.schedule = o.pipeline.schedule;
  l.microbatches = o.pipeline.microbatches;
  l.virtual_stages = o.pipeline.virtual_stages;
  return l;
}

// The tiers the swap spaces stand for.
Offload options_offload(const ParallelOptions& o) {
  Offload t;
  const bool swap = o.param_swap || o.grad_swap;
  t.optimizer = swap ? OffloadTier::kNvme : OffloadTier::kNone;
  t.parameters = o.param_swap ? OffloadTier::kNvme : OffloadTier::kNone;
  t.gradients = o.grad_swap ? OffloadTier::kNvme : OffloadTier::kNone;
  return t;
}
}  // namespace

ParallelGPT::ParallelGPT(std::vector<GPT<float>*> chunks, parallel::ParallelDims& dims,
                         const ParallelOptions& options, Allocator& allocator)
    : chunks_(std::move(chunks)), dims_(dims), options_(options) {
  KIRI_CHECK(!chunks_.empty(), "ParallelGPT needs the model or this rank's chunks of it");
  // The cuts, in this order; the model's shape is checked against tp first.
  apply_tp();
  kiri::validate_layout(options_layout(options, dims.shape()), {}, options_offload(options));
  apply_pp();
  apply_ac();
  if (options.before_allocate) options.before_allocate();
  if (options.zero_stage == 0)
    apply_ddp(allocator);
  else
    apply_zero(allocator);
  install_forward_hooks();
}

// Tensor parallelism (and sequence parallelism with it): each chunk's layers keep this rank's
// part of their parameters (parallel/tp/layers.h, vocab_parallel.h). On one rank they stay whole
// (the model's shape is still checked against the layout).
void ParallelGPT::apply_tp() {
  const parallel::tp::TensorParallel tp{&dims_.tp(), options_.sequence_parallel};
  for (GPT<float>* c : chunks_) c->apply_tp(tp);
}

// Pipeline parallelism: the model arrives cut into this rank's chunks (make_gpt_chunks). With
// a tied LM head the first and last stage each hold the embedding; their gradients are summed
// over the "embedding" group. An untied head (llama) shares nothing between them.
void ParallelGPT::apply_pp() {
  if (dims_.shape().pp == 1) return;
  const bool tied = chunks_.front()->tied();
  for (GPT<float>* c : chunks_)
    if (tied && c->has_wte()) {
      tied_wte_ = &c->wte();
      if (!c->part().first) tied_copy_ = tied_wte_;
    }
  if (tied) embedding_group_ = dims_.embedding_group();
  pipeline_ = std::make_unique<Pipeline>(chunks_, dims_.pp(), options_.pipeline);
}

// Activation checkpointing: a property of the blocks, independent of how the parameters are
// laid out.
void ParallelGPT::apply_ac() {
  for (GPT<float>* c : chunks_) {
    c->set_activation_checkpointing(options_.checkpoint_every);
    c->set_selective_recompute(options_.selective);
  }
}

// ZeRO stage 0 = DDP: whole parameters and gradients in one flat store; bucketed all-reduce
// started from backward's grad-ready hook; the token embedding's gradient travels as rows
// (tokens, dx) so that the V x C matrix is reduced early, with the LM head's part, instead of
// at the very end of backward. Under pipeline parallelism the gradients are reduced after the
// whole pipeline step.
void ParallelGPT::apply_ddp(Allocator& allocator) {
  store_ = std::make_unique<nn::ParameterStore>(all_parameters(), options_.dtype, allocator);
  comm::Communicator& dp = dims_.dp();
  if (dp.size() == 1) return;
  ddp_ = std::make_unique<parallel::DistributedDataParallel>(*store_, dp, options_.ddp, allocator);
  if (chunks_.size() == 1 && chunks_[0]->whole()) {
    // (Under tensor parallelism the rows of wte are split: no deferral.)
    if (dims_.shape().tp == 1)
      model().set_token_grad_sink([this](const Tensor& tokens, const Tensor& dx) {
        token_rows_ = tokens;
        token_dx_ = dx;
      });
    model().set_grad_ready_hook(
        [this](const std::vector<nn::Parameter*>& ready) { ddp_->on_grads_ready(ready); });
  }
}

// ZeRO stages 1-3: units by the wrap policy, sharded over the shard group (the dp group, or
// with hybrid sharding blocks of shard_group_size consecutive dp ranks, replicated across the
// blocks).
void ParallelGPT::apply_zero(Allocator& allocator) {
  comm::Communicator& dp = dims_.dp();
  const int group = options_.shard_group_size == 0 ? dp.size() : options_.shard_group_size;
  comm::Communicator* shard = &dp;
  comm::Communicator* replicas = nullptr;
  if (group < dp.size()) {
    shard = &dims_.shard_group(group);
    replicas = &dims_.replica_group(group);
  }
  parallel::ShardOptions so;
  so.stage = options_.zero_stage;
  so.dtype = options_.dtype;
  so.prefetch = options_.prefetch;
  so.param_swap = options_.param_swap;
  so.grad_swap = options_.grad_swap;
  so.tied_head = chunks_.front()->tied();
  std::vector<std::vector<nn::Parameter*>> groups;
  for (GPT<float>* c : chunks_)
    for (auto& g : c->parameter_groups()) groups.push_back(std::move(g));
  std::vector<std::vector<int>> units;
  if (chunks_.size() == 1 && chunks_[0]->whole()) {
    units = parallel::wrap_policy(model().num_groups(), options_.wrap_blocks);
  } else {  // stage 1 under pipeline parallelism: one unit per group, reduced after the step
    for (int g = 0; g < static_cast<int>(groups.size()); ++g) units.push_back({g});
  }
  sharded_ = std::make_unique<parallel::ShardedDataParallel>(std::move(groups), std::move(units),
                                                             *shard, replicas, so, allocator);
}

void ParallelGPT::build_update_units() {
  // Stage 3 keeps no full parameters: its shards are read when gathered, so a unit is
  // updated when the engine first reads it (set_before_read), prefetches included.
  update_unit_of_.assign(chunks_.size(), {});
  int global = 0;  // the sharding engine numbers the groups of all chunks in order
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const auto groups = chunks_[c]->parameter_groups();
    for (const auto& g : groups) {
      int index = -1;
      if (sharded_) {
        index = sharded_->unit_of_group(global);
        if (update_units_.empty() || update_units_.back().sharded_unit != index) {
          const parallel::ShardUnit& u = sharded_->units().at(static_cast<size_t>(index));
          update_units_.push_back({u.shard_offset + u.shard, index, 0, 0});
        }
        index = static_cast<int>(update_units_.size()) - 1;
      } else if (!g.empty()) {
        UpdateUnit u{0, -1, g.front()->offset, 0};
        for (const nn::Parameter* p : g) {
          u.grad_begin = std::min(u.grad_begin, p->offset);
          u.grad_end = std::max(u.grad_end, p->offset + p->numel());
        }
        u.state_end = u.grad_end;
        update_units_.push_back(u);
        index = static_cast<int>(update_units_.size()) - 1;
      }
      update_unit_of_[c].push_back(index);
      ++global;
    }
  }
  for (size_t i = 1; i < update_units_.size(); ++i)
    KIRI_CHECK(update_units_[i - 1].state_end <= update_units_[i].state_end,
               "the optimizer's state must follow the forward order of the units (unit ", i,
               " ends at ", update_units_[i].state_end, ", before unit ", i - 1, " at ",
               update_units_[i - 1].state_end, ")");
}

void ParallelGPT::install_forward_hooks() {
  build_update_units();
  const bool whole = chunks_.size() == 1 && chunks_[0]->whole();
  if (sharded_ && whole) {
    auto* s = sharded_.get();
    s->set_before_read([this](int unit) {
      if (update_pending_) update_units_through(unit);  // sharding units = update units
    });
    model().set_group_hooks({[this, s](int g) {
                               if (update_pending_) update_units_through(update_unit_of_[0][g]);
                               s->before_forward(g);
                             },
                             [s](int g) { s->after_forward(g); },
                             [s](int g) { s->before_backward(g); },
                             [s](int g) { s->after_backward(g); }});
    return;
  }
  // Stage 0, and stage 1 under pipeline parallelism (reduced after the schedule): only
  // the deferred update needs the forward.
  for (size_t c = 0; c < chunks_.size(); ++c)
    chunks_[c]->set_group_hooks({[this, c](int g) {
                                   const int u = update_unit_of_[c][static_cast<size_t>(g)];
                                   if (update_pending_ && u >= 0) update_units_through(u);
                                 },
                                 {},
                                 {},
                                 {}});
}

void ParallelGPT::defer_update(std::function<void(int64_t)> update_through,
                               std::function<void()> finish) {
  KIRI_CHECK(!update_pending_, "a deferred update began before the last one finished");
  update_through_ = std::move(update_through);
  finish_update_ = std::move(finish);
  updated_ = 0;
  update_pending_ = true;
}

void ParallelGPT::update_units_through(int unit) {
  for (; updated_ < update_units_.size() && static_cast<int>(updated_) <= unit; ++updated_) {
    const UpdateUnit& u = update_units_[updated_];
    update_through_(u.state_end);
    if (sharded_) {
      sharded_->zero_unit_grad(u.sharded_unit);
      if (sharded_->options().stage < 3) sharded_->gather_unit_parameters(u.sharded_unit);
    } else {
      store_->grads().flat_range(u.grad_begin, u.grad_end - u.grad_begin).zero_();
    }
  }
}

void ParallelGPT::finish_update() {
  if (!update_pending_) return;
  update_units_through(static_cast<int>(update_units_.size()) - 1);
  update_through_(std::numeric_limits<int64_t>::max());
  finish_update_();
  update_pending_ = false;
  update_through_ = {};
  finish_update_ = {};
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
    s.counted_in_norm = s.param != tied_copy_ && (s.param->tp.dim >= 0 || dims_.tp_index() == 0);
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

std::vector<int> ParallelGPT::optimizer_grads_files() const {
  return sharded_ ? sharded_->grad_files() : std::vector<int>{};
}

std::vector<comm::Communicator*> ParallelGPT::norm_groups() {
  std::vector<comm::Communicator*> out;
  if (sharded_) out.push_back(&sharded_->shard_group());
  if (dims_.shape().pp > 1) out.push_back(&dims_.pp());
  if (dims_.shape().tp > 1) out.push_back(&dims_.tp());
  return out;
}

std::vector<comm::Communicator*> ParallelGPT::communicators() {
  return dims_.groups();
}

std::function<void()> ParallelGPT::poller() {
  if (sharded_) return [this] { sharded_->progress(); };
  if (!ddp_ && !pipeline_) return {};
  return [this] { dims_.world().progress(); };
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
  if (!token_rows_.defined()) {  // nothing deferred (tensor parallelism)
    if (last_) ddp_->finalize_grads({});
    return;
  }
  if (!last_) {
    // Accumulating: this micro-batch's token-embedding rows stay local.
    model().add_token_embedding_grad(token_rows_, token_dx_);
  } else {
    ddp_->finalize_grads({{&model().wte(), token_rows_, token_dx_}});
  }
  token_rows_ = token_dx_ = Tensor();
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
        Tracer::Span span(dims_.world().tracer(), "forward", "compute");
        loss += model().forward(ctx, x, y, loss_weight);
      }
      {
        Tracer::Span span(dims_.world().tracer(), "backward", "compute");
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
