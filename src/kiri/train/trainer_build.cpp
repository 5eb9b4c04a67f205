// Trainer::build, along its seams: each piece below runs once, in build()'s order.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/base/units.h"
#include "kiri/parallel/pp/schedule.h"
#include "kiri/train/fingerprint.h"
#include "kiri/train/gemm_choice.h"
#include "kiri/train/offload_io.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

using nlohmann::json;

namespace {

// The most epochs of the training split one step may read (docs/config.md, "Limits").
constexpr int64_t kMaxEpochsPerStep = 10;

// Limits checked before the first step, once the data is known: one micro-batch over dp
// fits in the training split (a bigger one only allocates what no sample fills, until the
// kernel's OOM killer ends the run), and one step reads at most kMaxEpochsPerStep epochs (a
// bigger global batch runs for hours before its first line).
void check_batch_against_data(const RunConfig& cfg, uint64_t samples, const std::string& dir) {
  const TrainConfig& t = cfg.train;
  const Layout& p = cfg.parallel;
  const auto n = static_cast<int64_t>(samples);
  KIRI_CHECK_KIND(kConfig, t.micro_batch * p.dp <= n, "train.micro_batch = ", t.micro_batch,
                  " x dp ", p.dp, " = ", t.micro_batch * p.dp,
                  " sequences per micro-batch, more than the ", n,
                  " samples of train.seq_len = ", t.seq_len, " tokens in the training split of ",
                  dir, ": lower train.micro_batch (at most ", std::max<int64_t>(1, n / p.dp), ")");
  const int64_t batch = global_batch(cfg);
  KIRI_CHECK_KIND(kConfig, batch <= kMaxEpochsPerStep * n, "one step would read ", batch,
                  " sequences (train.micro_batch ", t.micro_batch, " x parallel.microbatches ",
                  p.microbatches, " x train.grad_accum ", t.grad_accum, " x dp ", p.dp,
                  "), more than ", kMaxEpochsPerStep, " epochs of the ", n,
                  " samples in the training split of ", dir, " (kiri's bound on one step, ",
                  kMaxEpochsPerStep * n, " sequences): lower train.grad_accum or --global-batch");
}

// train.epochs > 0: the steps that pass over the training split that many times, now that
// its samples and the global batch are known (a resume counts them again, from the same data).
void steps_from_epochs(RunConfig& cfg, uint64_t samples, bool rank0) {
  TrainConfig& t = cfg.train;
  if (t.epochs <= 0) return;
  const int64_t batch = global_batch(cfg);
  const double steps = std::ceil(t.epochs * static_cast<double>(samples) / batch);
  KIRI_CHECK_KIND(kConfig, steps <= double(int64_t{1} << 40), "train.epochs = ", t.epochs, " is ",
                  steps, " steps: give fewer epochs");
  t.steps = std::max<int64_t>(1, static_cast<int64_t>(steps));
  if (rank0)
    log::info("train.epochs ", t.epochs, ": ", t.steps, " steps of ", batch, " sequences over the ",
              samples, " training samples");
}

}  // namespace

void Trainer::build() {
  check_same_config();  // first: everything after it assumes the ranks agree
  resolve_and_validate_layout();
  apply_communicator_options();
  if (!cfg_.train.mem_limit.empty()) allocator_.set_limit(parse_bytes(cfg_.train.mem_limit));
  load_tokenizer();
  install_oom_advice();
  json fingerprints;  // rank 0's, for the checkpoints
  data::Dataset ds = open_data(fingerprints);
  const std::string data_dir = ds.dir;
  start_tracer();
  train_stream_ = std::make_unique<data::SampleStream>(std::move(ds.train), cfg_.train.seq_len,
                                                       cfg_.train.seed);
  val_stream_ =
      std::make_unique<data::SampleStream>(std::move(ds.val), cfg_.train.seq_len, cfg_.train.seed);
  if (ds.train_mask.size() > 0) {  // fine-tuning data: the loss on the counted tokens only
    train_stream_->set_loss_mask(std::move(ds.train_mask));
    val_stream_->set_loss_mask(std::move(ds.val_mask));
  }
  check_batch_against_data(cfg_, train_stream_->num_samples(), data_dir);
  steps_from_epochs(cfg_, train_stream_->num_samples(), world_->rank() == 0);
  build_dims();
  build_model(parallel_options());
  build_optimizer();
  // Here, before the loss scaler and the batches: with checkpoint.async it reserves its
  // staging buffers at once, in the order the trainer always allocated them.
  checkpoints_ = std::make_unique<CheckpointManager>(
      CheckpointParts{cfg_, config_json_, *world_, allocator_, *dims_, *parallel_, *optimizer_,
                      *tokenizer_},
      std::move(fingerprints));
  build_loss_scaler();
  checkpoints_->set_loss_scaler(scaler_.get());
  allocate_buffers();
  gemm_flops_ = measure_gemm_flops_rate();
  choose_gemm_lowp();
}

void Trainer::resolve_and_validate_layout() {
  // The optimizer and the schedule take the scaled rates.
  const Resolution r = resolve(cfg_, {.world = world_->size(), .learning_rate = true});
  if (r.layout && world_->rank() == 0 && world_->size() > 1)  // one process: nothing to say
    log::info(*r.layout);
  if (!r.learning_rate.empty() && world_->rank() == 0) log::info(r.learning_rate);
  check_layout(cfg_, world_->size());  // every layout rule, against this world and model
}

void Trainer::apply_communicator_options() {
  comm::Options co = world_->options();
  co.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg_.parallel.timeout_s * 1000));
  co.check_collectives = cfg_.parallel.check_collectives;
  co.scratch_memory = allocator_.core();  // kiri's transfers' scratch counts as buffers
  world_->set_options(co);
}

void Trainer::load_tokenizer() {
  tokenizer_ = data::make_tokenizer(cfg_.data.tokenizer, resolve_data_dir(cfg_.data));
  const int64_t given = cfg_.model.vocab_size;
  resolve(cfg_, {.tokenizer_vocab = tokenizer_->vocab_size(), .tokenizer = tokenizer_->name()});
  if (given == 0 && !config_json_.empty()) {  // checkpoints store the resolved size
    json j = json::parse(config_json_);
    j["model"]["vocab_size"] = cfg_.model.vocab_size;
    config_json_ = j.dump();
  }
  KIRI_CHECK_KIND(kConfig, cfg_.train.seq_len <= cfg_.model.block_size,
                  "train.seq_len = ", cfg_.train.seq_len,
                  " exceeds model.block_size = ", cfg_.model.block_size);
}

void Trainer::install_oom_advice() {
  if (!advisor_) return;
  // The vocabulary is resolved: the advice can model this run.
  allocator_.set_oom_advice([this](const MemoryStats& s, Category c, int64_t bytes) {
    try {
      return advisor_(cfg_, world_->size(), s, c, bytes);
    } catch (const std::exception& e) {
      return std::string("(no planner advice: ") + e.what() + ")";
    }
  });
}

data::Dataset Trainer::open_data(json& fingerprints) {
  // Rank 0 tokenizes the corpus once and checks every token; the others then map the
  // checked shards and read only their own samples.
  const int64_t vocab = cfg_.model.vocab_size, seq_len = cfg_.train.seq_len;
  std::string shard_dir;
  data::Dataset ds;
  if (world_->rank() == 0) {
    shard_dir = prepare_corpus_shards(cfg_.data, *tokenizer_);
    ds = open_run_dataset(shard_dir, cfg_.data, tokenizer_->name(), vocab, seq_len, true);
    // After the check above, which verified the shards' checksums that this hash stands on.
    fingerprints = {{"tokenizer", tokenizer_fingerprint(*tokenizer_)},
                    {"data", data_fingerprint(ds)}};
  }
  world_->barrier();
  if (world_->rank() != 0) {
    shard_dir = prepare_corpus_shards(cfg_.data, *tokenizer_);
    ds = open_run_dataset(shard_dir, cfg_.data, tokenizer_->name(), vocab, seq_len, false);
  }
  return ds;
}

void Trainer::start_tracer() {
  if (cfg_.log.trace.empty()) return;
  // Right after a barrier: the ranks' epochs agree to within its skew.
  tracer_ = std::make_unique<Tracer>(world_->rank());
  world_->set_tracer(tracer_.get());  // split() passes it on to the ParallelDims' groups
}

void Trainer::build_dims() {
  dims_ = std::make_unique<parallel::ParallelDims>(
      *world_, parallel::MeshShape{cfg_.parallel.dp, cfg_.parallel.tp, cfg_.parallel.pp});
  if (dims_->hosts().hosts > 1 && cfg_.parallel.link_probe_every > 0)
    link_probe_ = std::make_unique<parallel::LinkProbe>(*world_, dims_->hosts(), allocator_);
  if (tracer_)  // explicitly too; ParallelGPT's groups split from these inherit it
    for (comm::Communicator* c : {&dims_->dp(), &dims_->tp(), &dims_->pp()})
      c->set_tracer(tracer_.get());
}

// The one layout's options (model::parallel_options): the layout is the config's.
model::ParallelOptions Trainer::parallel_options() const {
  return model::parallel_options(cfg_.parallel, cfg_.train.dtype);
}

void Trainer::build_model(model::ParallelOptions po) {
  const int pp = dims_->shape().pp;
  chunks_ =
      model::make_gpt_chunks(cfg_.model, pp, dims_->pp_index(), po.pipeline, cfg_.train.seq_len);
  std::vector<model::GPT<float>*> chunks;
  for (auto& c : chunks_) chunks.push_back(c.get());
  open_swap_space();
  po.before_allocate = [this] { check_model_states_fit(); };  // on the cut chunks
  // The layout's rules put the optimizer's states on NVMe first: swap_ is open.
  const Offload offload = offload_spec(cfg_.offload);
  if (offload.parameters == OffloadTier::kNvme) po.param_swap = swap_.get();
  if (offload.gradients == OffloadTier::kNvme) po.grad_swap = swap_.get();
  parallel_ = std::make_unique<model::ParallelGPT>(chunks, *dims_, po, allocator_);
}

void Trainer::build_optimizer() {
  const TrainConfig& t = cfg_.train;
  optimizer_ = std::make_unique<optim::AdamW>(
      parallel_->optimizer_state_numel(), parallel_->optimizer_segments(), t.optimizer, allocator_,
      parallel_->norm_groups(), make_state_offload());
  optimizer_->initialize(t.seed);
  parallel_->synchronize_parameters();
}

void Trainer::build_loss_scaler() {
  const TrainConfig& t = cfg_.train;
  if (t.dtype != Precision::kFp16) return;
  optim::LossScalerOptions lo;
  lo.dynamic = t.loss_scale == 0;
  lo.initial_scale = lo.dynamic ? std::ldexp(1.0, t.initial_scale_power) : t.loss_scale;
  lo.growth_interval = t.loss_scale_window;
  lo.min_scale = std::min(t.min_loss_scale, lo.initial_scale);
  scaler_ = std::make_unique<optim::DynamicLossScaler>(lo);
}

// kAuto's 16-bit GEMM path, measured on this run's own shapes (train/gemm_choice.h).
void Trainer::choose_gemm_lowp() {
  const DType dt = compute_dtype();
  if (dt == DType::kF32) return;
  const GemmLowpChoice c = choose_gemm_lowp_path(
      *world_, dt,
      step_gemm_shapes(cfg_.model, cfg_.train.micro_batch, cfg_.train.seq_len, cfg_.parallel.tp),
      allocator_);
  gemm_lowp_note_ = c.note;
  gemm_lowp_path_ = c.path;
}

void Trainer::allocate_buffers() {
  const TrainConfig& t = cfg_.train;
  // A step's rows per rank: micro_batch x the pipeline's micro-batches.
  const int64_t rows = t.micro_batch * cfg_.parallel.microbatches;
  inputs_ = Tensor::empty({rows, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
  targets_ = Tensor::empty({rows, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
  eval_inputs_ =
      Tensor::empty({t.micro_batch, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
  eval_targets_ =
      Tensor::empty({t.micro_batch, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
}

}  // namespace kiri::train
