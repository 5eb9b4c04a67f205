#include "kiri/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <omp.h>

#include "kiri/base/log.h"
#include "kiri/base/stop_signal.h"
#include "kiri/base/timer.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/comm/hang_error.h"
#include "kiri/comm/self.h"
#include "kiri/data/corpus.h"
#include "kiri/data/sft.h"
#include "kiri/data/shard.h"
#include "kiri/kernels/peak.h"
#include "kiri/plot/plot.h"
#include "kiri/train/faults.h"
#include "kiri/train/metric_sinks.h"
#include "kiri/train/run_dir.h"
#include "kiri/train/step.h"

namespace kiri::train {

namespace fs = std::filesystem;

std::string resolve_data_dir(const DataConfig& cfg) {
  if (!cfg.assets.empty()) return cfg.assets;
  if (const char* env = std::getenv("KIRI_DATA_DIR"); env && *env) return env;
  return KIRI_DEFAULT_DATA_DIR;
}

std::string prepare_corpus_shards(const DataConfig& cfg, const data::Tokenizer& tokenizer) {
  if (!cfg.dir.empty()) {
    // corpus keeps its default when dir is given: anything else names two corpora.
    KIRI_CHECK_KIND(kConfig, cfg.corpus == "moby-dick" || cfg.corpus.empty(),
                    "data.corpus = ", cfg.corpus, " and data.dir = ", cfg.dir,
                    " both name a corpus: give one (a text file, or a folder of shards)");
    return cfg.dir;
  }
  const std::string dir = resolve_data_dir(cfg);
  std::string text, out;
  if (cfg.corpus == "moby-dick") {
    text = dir + "/moby-dick.txt";
    KIRI_CHECK_KIND(kData, fs::exists(text), "the default corpus ", text,
                    " is missing: run scripts/bootstrap.sh (make setup) or set data.assets");
    out = dir + "/tokens/moby-dick." + tokenizer.name();
  } else {
    text = cfg.corpus;
    out = cfg.corpus + ".kiri-" + tokenizer.name();
  }
  data::ensure_prepared(text, tokenizer, out, cfg.val_fraction);
  return out;
}

data::Dataset open_run_dataset(const std::string& dir, const DataConfig& cfg,
                               const std::string& tokenizer, int64_t vocab_size, int64_t seq_len,
                               bool verify) {
  data::Dataset ds = data::open_dataset(dir);
  if (!ds.tokenizer.empty() && ds.tokenizer != tokenizer)
    KIRI_RAISE(kData, "the shards in ", dir, " were made with tokenizer ", ds.tokenizer,
               ", this run's is ", tokenizer, " (data.tokenizer = ", cfg.tokenizer,
               "): set data.tokenizer to the one that made them, or tokenize the text again");
  for (const auto* split : {&ds.train, &ds.val}) {
    const char* name = split == &ds.train ? "training" : "validation";
    if (split->size() == 0) KIRI_RAISE(kData, "the ", name, " split of ", dir, " is empty");
    if (split->size() < static_cast<uint64_t>(seq_len) + 1)
      KIRI_RAISE(kData, "the ", name, " split of ", dir, " holds ", split->size(),
                 " tokens, shorter than one sample of train.seq_len + 1 = ", seq_len + 1);
  }
  if (verify) {
    Timer timer;
    ds.train.verify(static_cast<uint32_t>(vocab_size));
    ds.val.verify(static_cast<uint32_t>(vocab_size));
    ds.train_mask.verify(data::kLossMaskVocab);  // empty (no fine-tuning masks): nothing
    ds.val_mask.verify(data::kLossMaskVocab);
    log::info("data: ", dir, " (", ds.layout, "): ", ds.train.size(), " train + ", ds.val.size(),
              " val tokens, checked below vocab ", vocab_size, " in ", timer.seconds(), " s");
  }
  return ds;
}

int64_t tokens_per_step(const RunConfig& c) {
  return global_batch(c) * c.train.seq_len;
}

std::string trace_path_for_rank(const std::string& path, int rank, int world_size) {
  if (world_size <= 1) return path;
  fs::path p(path);
  const std::string ext = p.extension().string();
  return p.replace_extension().string() + ".rank" + std::to_string(rank) + ext;
}

Trainer::Trainer(RunConfig cfg, std::string config_json)
    : cfg_(resolve_run_paths(std::move(cfg))),
      config_json_(std::move(config_json)),
      own_world_(comm::self_communicator()),
      world_(own_world_.get()) {
  build_detaching_tracer();
}

Trainer::Trainer(RunConfig cfg, comm::Communicator& world, std::string config_json,
                 OomAdvisor advisor)
    : cfg_(resolve_run_paths(std::move(cfg))),
      config_json_(std::move(config_json)),
      world_(&world),
      advisor_(std::move(advisor)) {
  build_detaching_tracer();
}

void Trainer::build_detaching_tracer() {
  try {
    build();
  } catch (...) {  // no destructor runs: the caller's world must not keep the tracer
    if (world_->tracer() == tracer_.get()) world_->set_tracer(nullptr);
    throw;
  }
}

void Trainer::set_peak_flops(double flops_per_s) {
  peak_flops_ = check_peak_flops(flops_per_s);
  peak_source_ = "given (--peak-flops)";
  peak_given_ = true;
}

void Trainer::assume_measured_peak(double flops_per_s, const std::string& how) {
  peak_flops_ = check_peak_flops(flops_per_s);
  peak_source_ = "measured: " + how;
  peak_given_ = false;
}

namespace {
std::string gflops(double flops) {  // "176", "0.001"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", flops / 1e9);
  return buf;
}
}  // namespace

void Trainer::raise_measured_peak(double achieved) {
  const double before = peak_flops_;
  if (peak_remeasured_) {  // measured twice already: the larger, quietly (warned once)
    peak_flops_ = achieved;
    peak_source_ = str("the achieved rate at step ", step_, ", above every measurement");
    return;
  }
  peak_remeasured_ = true;
  const int threads = omp_get_max_threads();
  const kernels::CorePeak core = kernels::measure_core_peak(compute_dtype());
  const double again = core.flops * threads;
  peak_flops_ = std::max({before, again, achieved});
  peak_source_ =
      peak_flops_ == achieved
          ? str("the achieved rate at step ", step_, ", above every measurement")
          : str("measured again at step ", step_, ": ", core.instruction, ", ",
                static_cast<int64_t>(core.flops / 1e9), " GFLOP/s x ", threads, " thread(s)");
  log::warn(
      "the peak measured at start, ", gflops(before), " GFLOP/s per rank, is below the ",
      gflops(achieved), " model GFLOP/s this rank computed at step ", step_,
      " (other processes shared its cores while it was measured); measured again: ", gflops(again),
      " GFLOP/s; MFU is now against ", gflops(peak_flops_), " GFLOP/s (", peak_source_,
      "). For an MFU that does not move with the machine's load, give the hardware's "
      "peak with --peak-flops F (FLOP/s per rank)");
}

std::string Trainer::describe_peak() {
  return str("MFU against a peak of ", static_cast<int64_t>(peak_flops() / 1e9),
             " GFLOP/s per rank (", peak_source_, ")");
}

double Trainer::peak_flops() {
  if (peak_flops_ == 0) {
    const int threads = omp_get_max_threads();
    const kernels::CorePeak& core = kernels::core_peak(compute_dtype());
    peak_flops_ = core.flops * threads;
    peak_source_ = str("measured: ", core.instruction, ", ", static_cast<int64_t>(core.flops / 1e9),
                       " GFLOP/s x ", threads, " thread(s)");
  }
  return peak_flops_;
}

Trainer::~Trainer() {
  // A save in flight completes, unless an error is unwinding the trainer: then it is cancelled
  // (the writer's destructor), leaving its temporary directory as a killed save would.
  if (checkpoints_ && std::uncaught_exceptions() == 0) {
    try {
      checkpoints_->wait();
    } catch (const std::exception& e) {
      log::warn(e.what());
    }
  }
  if (tracer_ && !trace_written_) {  // run() did not finish: keep what was recorded
    try {
      write_trace();
    } catch (const std::exception& e) {
      log::warn("could not write the trace: ", e.what());
    }
  }
  if (world_ && world_->tracer() == tracer_.get()) world_->set_tracer(nullptr);
}

void Trainer::write_trace() {
  if (!tracer_) return;
  const std::string path = trace_path_for_rank(cfg_.log.trace, world_->rank(), world_->size());
  if (const fs::path dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir);
  tracer_->write(path);
  trace_written_ = true;
  if (is_rank0())
    log::info("wrote the trace ", path, world_->size() > 1 ? " (one file per rank)" : "");
}

DType Trainer::compute_dtype() const {
  return model::dtype_of(cfg_.train.dtype);
}

std::string Trainer::save_checkpoint() {
  return checkpoints_->save(step_, data_position_);
}

void Trainer::wait_for_checkpoint() {
  checkpoints_->wait();
}

void Trainer::load_checkpoint(const std::string& path) {
  checkpoints_->load(path, step_, data_position_);
}

void Trainer::init_from(const std::string& path) {
  checkpoints_->init_from(path);
}

std::vector<std::pair<std::string, Tensor>> Trainer::gather_model() {
  return checkpoints_->gather_model();
}

nn::ParameterStore& Trainer::store() {
  finish_update();
  KIRI_CHECK(parallel_->store(),
             "the flat parameter store exists under ZeRO stage 0 only (this "
             "run shards with stage ",
             parallel_->zero_stage(), ")");
  return *parallel_->store();
}

void Trainer::fill_batch(Tensor& inputs, Tensor& targets, data::SampleStream& stream,
                         uint64_t first, bool sequential) {
  const int64_t b = inputs.dim(0), t = inputs.dim(1);
  int32_t* x = inputs.data<int32_t>();
  int32_t* y = targets.data<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    if (sequential)
      stream.fill_sequential((first + i) % stream.num_samples(), x + i * t, y + i * t);
    else
      stream.fill(first + i, x + i * t, y + i * t);
  }
}

int64_t Trainer::counted_targets(uint64_t first, int64_t samples) const {
  if (!train_stream_->masked()) return samples * train_stream_->seq_len();
  int64_t n = 0;
  for (int64_t i = 0; i < samples; ++i)
    n += train_stream_->counted_targets(first + static_cast<uint64_t>(i));
  return n;
}

StepMetrics Trainer::train_step() {
  const TrainConfig& t = cfg_.train;
  const int64_t dp = dims_->shape().dp, rank = dims_->dp_index();
  peak_flops();  // measured once, outside the step's time and trace
  for (comm::Communicator* c : parallel_->communicators()) c->reset_stats();
  Tracer::Span step_span(tracer_.get(), "step " + std::to_string(step_ + 1), "step",
                         Tracer::Lane::kStep);
  // A failed background save is named at the step after it (checkpoint_async.h).
  checkpoints_->rethrow_failure();
  model::Pipeline* pipeline = dims_->shape().pp > 1 ? parallel_->pipeline() : nullptr;
  const model::PipelineStats pipeline_before =
      pipeline ? pipeline->stats() : model::PipelineStats{};
  Timer timer;
  const int64_t read0 = swap_ ? swap_->bytes_read() : 0;
  const int64_t written0 = swap_ ? swap_->bytes_written() : 0;
  const double wait0 = swap_ ? swap_->wait_seconds() : 0;
  nn::Context ctx{allocator_};
  ctx.poll = parallel_->poller();
  // Each accumulation step reads the next rows x dp samples of the stream
  // (rows = micro_batch x pipeline micro-batches); this dp rank takes its
  // contiguous slice, so the global batch is the same for any layout.
  const int64_t rows = inputs_.dim(0);
  StepSettings settings;
  settings.lr = lr_at_step(t, step_);
  // The mean over the global batch's counted targets (all of them without a loss mask):
  // every rank counts the whole global batch from the stream, so every layout divides by
  // the same number. None counted: weight 0, so the loss and the gradients are 0.
  const int64_t counted = counted_targets(data_position_, rows * dp * t.grad_accum);
  settings.loss_weight = counted > 0 ? 1.0 / static_cast<double>(counted) : 0.0;
  settings.accumulation = t.grad_accum;
  settings.loss_factor = fault_scale_for(world_->rank(), step_);
  TrainingStep step(*parallel_, *optimizer_, {tracer_.get(), scaler_.get()});
  const StepOutcome out = step.run(ctx, inputs_, targets_, settings, [&](int64_t) {
    const uint64_t first = data_position_ + static_cast<uint64_t>(rank * rows);
    fill_batch(inputs_, targets_, *train_stream_, first, false);
    if (sample_observer_) sample_observer_(first, rows);
    data_position_ += static_cast<uint64_t>(rows * dp);
  });
  ++step_;
  const double seconds = timer.seconds();
  // The loss of the global batch, for reporting (after the timed step).
  Tensor loss = Tensor::empty({1}, DType::kF64, Category::kBuffers, allocator_);
  loss.data<double>()[0] = out.loss_sum;
  if (dims_->shape().pp > 1)
    dims_->pp().all_reduce(loss, comm::ReduceOp::kSum);  // the last stage's
  dims_->dp().all_reduce(loss, comm::ReduceOp::kSum);
  StepMetrics m = make_metrics(loss.data<double>()[0] * settings.loss_weight, settings.lr,
                               out.grad_norm, seconds);
  m.skipped = out.skipped;
  if (swap_) {
    m.offload_read_bytes = swap_->bytes_read() - read0;
    m.offload_written_bytes = swap_->bytes_written() - written0;
    m.offload_wait_s = swap_->wait_seconds() - wait0;
  }
  if (pipeline) m.bubble = (pipeline->stats() - pipeline_before).bubble();
  if (scaler_) {
    m.loss_scale = out.loss_scale;
    m.skipped_steps = scaler_->skipped_steps();
  }
  add_comm_stats(m);
  return m;
}

void Trainer::add_comm_stats(StepMetrics& m) {
  for (int k = 0; k < comm::kNumOpKinds; ++k) {
    const auto kind = static_cast<comm::OpKind>(k);
    comm::OpStats total;
    for (comm::Communicator* c : parallel_->communicators()) {
      const comm::OpStats s = c->stats(kind);
      total.calls += s.calls;
      total.bytes_sent += s.bytes_sent;
      total.bytes_received += s.bytes_received;
      total.wait_s += s.wait_s;
    }
    if (total.calls > 0) m.comm.emplace_back(comm::op_kind_name(kind), total);
  }
}

StepMetrics Trainer::make_metrics(double loss, double lr, double norm, double seconds) {
  const TrainConfig& t = cfg_.train;
  StepMetrics m;
  m.step = step_;
  m.total_steps = t.steps;
  m.loss = loss;
  m.lr = lr;
  m.grad_norm = norm;
  m.tokens = tokens_per_step(cfg_);
  m.step_s = seconds;
  m.tokens_per_s = static_cast<double>(m.tokens) / seconds;
  // Per rank: this rank's share of the model FLOPs over its peak (and over
  // its measured GEMM rate).
  const double model_flops_per_s =
      cfg_.model.flops_per_token(t.seq_len) * m.tokens_per_s / static_cast<double>(world_->size());
  if (!peak_given_ && model_flops_per_s > peak_flops()) raise_measured_peak(model_flops_per_s);
  m.mfu = model_flops_utilization(model_flops_per_s, peak_flops());
  m.mfu_gemm = model_flops_utilization(model_flops_per_s, gemm_flops_);
  m.mfu_peak = peak_source_;
  m.gemm_lowp = gemm_lowp_path_;
  if (m.mfu > 1 && !mfu_warned_) {  // only a given peak can be below the achieved rate
    mfu_warned_ = true;
    log::warn("MFU ", m.mfu, " > 1 at step ", step_, ": this rank computed ", model_flops_per_s,
              " model FLOP/s, above its peak of ", peak_flops_, " FLOP/s (", peak_source_,
              "); the peak is wrong: give the hardware's with --peak-flops");
  }
  m.mem = allocator_.stats();
  return m;
}

double Trainer::evaluate(int64_t n_batches) {
  Tracer::Span eval_span(tracer_.get(), "evaluate", "step", Tracer::Lane::kStep);
  parallel_->finish_update();
  nn::Context ctx{allocator_, /*training=*/false};
  const int64_t b = cfg_.train.micro_batch, dp = dims_->shape().dp, rank = dims_->dp_index();
  n_batches = std::min<int64_t>(n_batches, (val_stream_->num_samples() + b - 1) / b);
  // Batch i is evaluated by dp rank i % dp; the sums meet in one all-reduce. Every rank
  // runs the same number of forwards (ZeRO-3's forward all-gathers over dp): a rank past
  // the last batch runs batch 0 again and drops its loss.
  Tensor sums = Tensor::zeros({2}, DType::kF64, Category::kBuffers, allocator_);
  for (int64_t first = 0; first < n_batches; first += dp) {
    const int64_t i = first + rank;
    fill_batch(eval_inputs_, eval_targets_, *val_stream_,
               i < n_batches ? static_cast<uint64_t>(i * b) : 0, true);
    // One stage: a compute span here; a pipeline records its own forwards.
    Tracer::Span span(dims_->shape().pp > 1 ? nullptr : tracer_.get(), "eval forward", "compute");
    const double loss = parallel_->forward_only(ctx, eval_inputs_, eval_targets_);
    if (i >= n_batches) continue;
    sums.data<double>()[0] += loss;
    const int32_t* y = eval_targets_.data<int32_t>();  // a masked target is -1
    sums.data<double>()[1] += static_cast<double>(
        std::count_if(y, y + eval_targets_.numel(), [](int32_t v) { return v >= 0; }));
  }
  if (dims_->shape().pp > 1) {  // only the last stage has the loss; every stage counted the tokens
    sums.data<double>()[1] /= dims_->shape().pp;
    dims_->pp().all_reduce(sums, comm::ReduceOp::kSum);
  }
  dims_->dp().all_reduce(sums, comm::ReduceOp::kSum);
  // No counted target in the evaluated batches (fine-tuning data): a loss of 0, as in training.
  return sums.data<double>()[1] > 0 ? sums.data<double>()[0] / sums.data<double>()[1] : 0.0;
}

namespace {
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", s);
  return buf;
}
}  // namespace

void Trainer::run() {
  try {
    run_steps();
  } catch (const Error& e) {
    if (swap_) swap_->keep_files(true);
    // A rank that does not answer is named by its rank; across hosts, say where it runs, and
    // keep the ranks for kiri launch, which leaves a lost host out of a restart.
    if (e.kind() != ErrorKind::kCommTimeout || !dims_ || dims_->hosts().hosts == 1) throw;
    const auto* hang = dynamic_cast<const comm::HangError*>(&e);
    const std::vector<int> missing = hang ? hang->missing_world_ranks() : std::vector<int>{};
    const parallel::HostMap& h = dims_->hosts();
    std::string text = e.message();
    if (!missing.empty())
      text += str("\nUnreachable: ", dims_->hosts_of(missing),
                  ": the host is lost, or its link to this rank's host (",
                  h.names[static_cast<size_t>(h.host_of[static_cast<size_t>(world_->rank())])],
                  ") is down");
    throw comm::HangError(text + "\nRanks by host: " + dims_->ranks_by_host(), missing, __FILE__,
                          __LINE__);
  } catch (...) {
    // A run stopped by an error keeps its swap files (the state they hold may be the only
    // trace of what went wrong); a resume rewrites them from the checkpoint.
    if (swap_) swap_->keep_files(true);
    throw;
  }
}

// Every rank at the same step boundary: the first stop signal any rank received (a scheduler
// may signal only some of them), the same on all, so that all save and stop together.
int Trainer::agreed_stop_signal() {
  const int local = stop_signal_requested();
  if (world_->size() == 1) return local;
  Tensor flag = Tensor::zeros({1}, DType::kF64, Category::kBuffers, allocator_);
  flag.data<double>()[0] = local;
  world_->all_reduce(flag, comm::ReduceOp::kMax);
  return static_cast<int>(flag.data<double>()[0]);
}

// A stop signal (stop_.signal): a checkpoint of this step (unless the step just saved one),
// committed before the run ends, so that --resume auto continues exactly here.
void Trainer::stop_at_signal(const std::pair<int64_t, std::string>& saved) {
  if (cfg_.checkpoint.dir.empty()) return;
  stop_.checkpoint = saved.first == step_ ? saved.second : save_checkpoint();
  wait_for_checkpoint();
}

void Trainer::probe_links(StepMetrics& m) {
  const parallel::LinkRates rates = link_probe_->measure();
  if (!is_rank0()) return;
  const parallel::HostMap& h = dims_->hosts();
  for (size_t i = 0; i < rates.bytes_per_s.size(); ++i)
    m.link_bytes_per_s.emplace_back(h.names[i], rates.bytes_per_s[i]);
  for (int s : rates.slow) m.slow_hosts.push_back(h.names[static_cast<size_t>(s)]);
}

// The host map (rank 0; ParallelDims made it on every rank), and a
// warning for each group that ought to stay inside a host and does not.
void Trainer::log_hosts() const {
  if (world_->size() == 1) return;
  const model::ParallelOptions& po = parallel_->options();
  const int shard = po.zero_stage > 0 ? po.shard_group_size : 0;
  log::info("hosts: ", dims_->host_summary(shard));
  for (const std::string& g : dims_->groups_across_hosts(shard))
    log::warn("the ", g == "tp" ? "tensor-parallel (tp)" : "hybrid sharding's shard",
              " group spans hosts: its collectives, on every layer, cross the link between "
              "hosts; place its ranks on one host (ranks per host a multiple of ",
              g == "tp" ? "parallel.tp" : "parallel.shard_group_size", ")");
}

// The start-up log (rank 0): model, data, layout, batch, MFU's peaks, state, GEMM path; one
// fact per line, each under 120 columns (docs/metrics.md has them all).
void Trainer::log_start() {
  const TrainConfig& t = cfg_.train;
  log::info("model: ", cfg_.model.num_parameters(), " parameters (n_layer ", cfg_.model.n_layer,
            ", n_head ", cfg_.model.n_head, ", n_embd ", cfg_.model.n_embd, ", vocab ",
            cfg_.model.vocab_size, ")");
  log::info("data: ", train_stream_->num_samples(), " train / ", val_stream_->num_samples(),
            " val samples of ", t.seq_len, " tokens (", tokenizer_->name(), ")");
  log::info("layout: ", dims_->shape().str(), " on ", world_->size(), " process(es)");
  log::info("batch: ", global_batch(cfg_), " sequences of ", t.seq_len, " tokens per step (",
            tokens_per_step(cfg_), " tokens) = micro_batch ", t.micro_batch, " x microbatches ",
            cfg_.parallel.microbatches, " x dp ", cfg_.parallel.dp, " x grad_accum ", t.grad_accum);
  log::info(describe_peak());
  log::info("mfu_gemm against the fp32 GEMM rate, ", static_cast<int64_t>(gemm_flops_ / 1e9),
            " GFLOP/s per rank");
  const model::ParallelOptions& po = parallel_->options();
  log_hosts();
  log::info(
      "state: ZeRO stage ", po.zero_stage,
      po.shard_group_size > 0 ? " in shard groups of " + std::to_string(po.shard_group_size)
                              : std::string(),
      ", ", dtype_name(compute_dtype()), " parameters and gradients",
      compute_dtype() == DType::kF32 ? "" : " (fp32 master weights)", ", activation checkpointing ",
      po.selective.any()         ? std::string("selective")
      : po.checkpoint_every == 0 ? std::string("off")
      : po.checkpoint_every == 1 ? std::string("every block")
                                 : "every " + std::to_string(po.checkpoint_every) + " blocks");
  // The note's lines (gemm_choice.h), each its own log line.
  for (size_t at = 0; at < gemm_lowp_note_.size();) {
    const size_t end = std::min(gemm_lowp_note_.find('\n', at), gemm_lowp_note_.size());
    log::info(dtype_name(compute_dtype()), " GEMMs: ", gemm_lowp_note_.substr(at, end - at));
    at = end + 1;
  }
}

void Trainer::run_steps() {
  const TrainConfig& t = cfg_.train;
  const bool rank0 = is_rank0();
  if (rank0) log_start();
  // A resumed run continues the file: the rows past its step (of an earlier, longer
  // attempt) go, so that each step appears once.
  if (rank0 && step_ > 0 && !cfg_.log.metrics.empty())
    if (const int64_t dropped = keep_metrics_through(cfg_.log.metrics, step_); dropped > 0)
      log::info("metrics: dropped ", dropped, " row(s) of ", cfg_.log.metrics, " past step ", step_,
                " (an earlier attempt's)");
  MetricSinks metrics(cfg_, rank0, step_);
  LossHistory history;    // this run's steps: the plot's when there is no metrics file
  StepClock clock;        // elapsed and ETA from here (rank 0 measured its peak above)
  int64_t nonfinite = 0;  // consecutive steps that made no progress (count_nonfinite)
  std::pair<int64_t, std::string> saved{-1, ""};  // this run's last checkpoint: step, folder
  while (step_ < t.steps) {
    inject_fault(world_->rank(), step_);
    StepMetrics m = train_step();
    const bool last = step_ == t.steps;
    if ((t.eval_every > 0 && step_ % t.eval_every == 0) || last) {
      m.val_loss = evaluate(t.eval_batches);
      history.val_steps.push_back(double(step_));
      history.val_loss.push_back(*m.val_loss);
    }
    clock.mark(m, t.steps - step_);
    if (link_probe_ && step_ % cfg_.parallel.link_probe_every == 0) probe_links(m);
    history.steps.push_back(double(step_));
    history.loss.push_back(m.loss);
    if (rank0) {
      metrics.write(m);
      if (step_ % cfg_.log.every == 0 || last || m.val_loss || !m.slow_hosts.empty())
        std::printf("%s\n", progress_line(m, verbose_progress_).c_str());
      std::fflush(stdout);
    }
    count_nonfinite(m, nonfinite);  // raises before a diverged run saves a checkpoint
    if (!cfg_.checkpoint.dir.empty() &&
        ((cfg_.checkpoint.every > 0 && step_ % cfg_.checkpoint.every == 0) || last)) {
      const std::string dir = save_checkpoint();
      // An asynchronous save logs itself once committed (checkpoint_async.h).
      if (rank0 && !cfg_.checkpoint.async)
        log::info("saved checkpoint ", dir, " in ", seconds_text(last_save_seconds()));
      saved = {step_, dir};
    }
    if (!last && (stop_.signal = agreed_stop_signal())) {
      stop_at_signal(saved);
      break;
    }
  }
  wait_for_checkpoint();  // the last save is committed before the run ends
  parallel_->finish_update();
  const std::string plot_file = plot_path(cfg_.log);
  if (rank0 && !plot_file.empty() && !history.steps.empty()) {
    // The whole run's history, resumed attempts included: the metrics file's.
    if (!cfg_.log.metrics.empty()) history = read_loss_history(cfg_.log.metrics);
    plot::write_line_plot_png(plot_file, loss_plot_series(history), "kiri: loss", "step",
                              "loss (nats/token)");
    log::info("wrote the loss curve ", plot_file);
  }
  write_trace();
}

}  // namespace kiri::train
