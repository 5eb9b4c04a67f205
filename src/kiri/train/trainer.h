#pragma once
// The training loop of one process: data, model, optimizer, metrics and
// checkpoints, configured by a RunConfig. `kiri train` is Trainer::run().
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiri/base/timer.h"
#include "kiri/base/trace.h"
#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/data/dataset.h"
#include "kiri/data/sample_stream.h"
#include "kiri/data/tokenizer.h"
#include "kiri/model/gpt.h"
#include "kiri/model/parallelize.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/offload/swap_space.h"
#include "kiri/optim/adamw.h"
#include "kiri/optim/loss_scaler.h"
#include "kiri/parallel/link_probe.h"
#include "kiri/train/checkpoint_manager.h"
#include "kiri/train/metrics.h"

namespace kiri::train {

// The assets folder (tokenizer files, the default corpus): data.assets, else
// $KIRI_DATA_DIR, else the bootstrap's data/.
std::string resolve_data_dir(const DataConfig& cfg);
// The folder of the run's token shards: data.dir as given, else the shards of
// data.corpus (tokenized on first use, reused after). Both set is kConfig.
std::string prepare_corpus_shards(const DataConfig& cfg, const data::Tokenizer& tokenizer);
// The shards of `dir` (data::open_dataset) checked for this run: the tokenizer
// that made kiri shards is this run's (`tokenizer`: its name, which for a
// tokenizer.json folder is hf-<hash of the file>, not the path), and (when `verify`: one pass over
// every token) checksums hold and every token is below vocab_size; each split
// holds a sample of seq_len + 1 tokens. kData naming the file and the numbers.
data::Dataset open_run_dataset(const std::string& dir, const DataConfig& cfg,
                               const std::string& tokenizer, int64_t vocab_size, int64_t seq_len,
                               bool verify);
// Tokens in one optimizer step's global batch, for every layout: global_batch(c) (micro_batch x
// parallel.microbatches x grad_accum x dp sequences) x train.seq_len. The loss is divided by
// it and metrics.jsonl's `tokens` (and tokens/s, MFU) count it.
int64_t tokens_per_step(const RunConfig& c);
// The trace file of `rank` for log.trace = path: the path itself in a world
// of one rank, else ".rank<R>" before the extension (runs/trace.rank3.json).
std::string trace_path_for_rank(const std::string& path, int rank, int world_size);

// Advice for the allocator's out-of-memory message (Allocator::set_oom_advice), given the
// run's config (the vocabulary resolved) and world size: `kiri train` asks the planner for
// the cheapest layout change that would fit (docs/planner.md, "Out of memory").
using OomAdvisor =
    std::function<std::string(const RunConfig& cfg, int world_size, const MemoryStats& stats,
                              Category category, int64_t bytes)>;

class Trainer {
 public:
  // Builds everything on this rank of `world` (resolving and validating the layout
  // first); `config_json`, the config as given, is kept for checkpoints. `advisor`, if set, is
  // installed on the allocator before anything is allocated.
  Trainer(RunConfig cfg, comm::Communicator& world, std::string config_json = "",
          OomAdvisor advisor = {});
  // A single process (a world of one rank).
  explicit Trainer(RunConfig cfg, std::string config_json = "");
  ~Trainer();

  // One optimizer step over grad_accum micro-batches. Offloaded (offload.optimizer =
  // nvme), the step's update is left running into the next forward, unit by unit
  // (ParallelGPT::defer_update); finish_update() completes it. evaluate, save_checkpoint,
  // gather_model, run and the accessors below that expose the state (model, store,
  // optimizer, parallel_model) complete it first.
  StepMetrics train_step();
  void finish_update();
  bool update_pending() const;  // a step's update is still running into the next forward
  // Mean loss over the first n micro-batches of the validation split.
  double evaluate(int64_t n_batches);
  // The whole run: steps, progress lines, metrics, evals, checkpoints, plot.
  void run();

  // MFU's denominator for this rank, FLOP/s (`kiri train --peak-flops`);
  // unset, the measured kernels::peak_flops of the compute dtype on this
  // rank's OpenMP threads. kConfig unless positive and finite.
  void set_peak_flops(double flops_per_s);
  // A measured peak that another way found (tests: the low peak a loaded machine measures).
  // A measured peak is never kept below the rate a step achieved: the first time a step
  // computes more model FLOP/s than it, the peak is measured again and the larger of the
  // two and the achieved rate is kept, with a warning naming --peak-flops (docs/metrics.md).
  void assume_measured_peak(double flops_per_s, const std::string& how);
  // The peak in use (measuring it on first use) and where it came from.
  double peak_flops();
  const std::string& peak_source() const { return peak_source_; }
  // "MFU against a peak of ... GFLOP/s per rank (where it came from)", for the start-up log.
  std::string describe_peak();

  // Checkpoints are the CheckpointManager's (checkpoint_manager.h); these forward to it.
  // Writes <checkpoint.dir>/step_N atomically and returns its path. With checkpoint.async
  // it returns once this rank's part is staged; a background thread writes the files and
  // rank 0's commits the directory (checkpoint_async.h). Either way it first waits for the
  // previous save, raising its failure.
  std::string save_checkpoint();
  // Waits for an asynchronous save in flight, raising its failure (no-op without one).
  void wait_for_checkpoint();
  // The seconds the last save_checkpoint held this rank: the whole save, or with
  // checkpoint.async the staging copy (and the wait for the previous save, also given alone).
  double last_save_seconds() const { return checkpoints_->last_save_seconds(); }
  double last_save_wait_seconds() const { return checkpoints_->last_save_wait_seconds(); }
  // Restores parameters, optimizer state, step and data position. Collective: every rank
  // reads its part, then all agree, so that a failure on any rank raises
  // comm::AgreedError (that rank's error) on every rank. Refuses non-finite values.
  void load_checkpoint(const std::string& path);

  // --init-from: the weights only (fresh optimizer, step 0, data position 0) from a model
  // folder (hf_model.h: a Hugging Face GPT-2 folder, or a kiri checkpoint root or step).
  // Collective and agreed like load_checkpoint; the folder's model must be this run's.
  void init_from(const std::string& path);
  // --accept-data-change: load_checkpoint continues on a tokenizer or data that changed
  // since the checkpoint was saved (logged), instead of refusing it (fingerprint.h).
  void accept_data_change(bool accept) { checkpoints_->accept_data_change(accept); }

  int64_t step() const { return step_; }
  // Called with (first position, count) for each block of training samples this rank reads
  // (tests check that a resumed run on another layout reads each sample once).
  void set_sample_observer(std::function<void(uint64_t, int64_t)> observer) {
    sample_observer_ = std::move(observer);
  }
  // The config the run uses: {run.dir} paths resolved, dp inferred, lr scaled.
  const RunConfig& config() const { return cfg_; }
  // The model, or with pipeline parallelism this rank's first chunk of it.
  model::GPT<float>& model() {
    finish_update();
    return *chunks_.front();
  }
  // The flat parameter store (ZeRO stage 0 only; stages 1-3 shard it).
  nn::ParameterStore& store();
  optim::AdamW& optimizer() {
    finish_update();
    return *optimizer_;
  }
  // offload.optimizer = nvme: this rank's swap files (else nullptr).
  offload::SwapSpace* swap_space() { return swap_.get(); }
  Allocator& allocator() { return allocator_; }
  parallel::ParallelDims& dims() { return *dims_; }
  model::ParallelGPT& parallel_model() {
    finish_update();
    return *parallel_;
  }
  bool is_rank0() const { return world_->rank() == 0; }
  // The whole model in fp32 (the master weights) on rank 0, gathered under
  // sharding (a collective: every rank calls it); empty on the other ranks.
  std::vector<std::pair<std::string, Tensor>> gather_model();
  // fp16 only (nullptr otherwise).
  optim::DynamicLossScaler* loss_scaler() { return scaler_.get(); }
  DType compute_dtype() const;
  const data::Tokenizer& tokenizer() const { return *tokenizer_; }
  // log.trace set: this rank's tracer (set on every communicator); else null.
  Tracer* tracer() { return tracer_.get(); }
  // How run() ended early on a stop signal (base/stop_signal.h: SIGTERM, SIGINT, SIGUSR1 under a
  // StopSignals guard): the signal (0: it ran to train.steps) and the checkpoint it saved at
  // that step boundary ("" without checkpoint.dir).
  struct Stop {
    int signal = 0;
    std::string checkpoint;
  };
  const Stop& stopped() const { return stop_; }
  // The progress line with every field (`kiri train --verbose`), not the 120-column one.
  void set_verbose_progress(bool verbose) { verbose_progress_ = verbose; }
  // Writes the trace to this rank's file (run() does at its end); no-op
  // without log.trace.
  void write_trace();

 private:
  // How many targets of the training samples at positions [first, first + samples) the
  // loss counts (fine-tuning data's mask; without one, samples x seq_len).
  int64_t counted_targets(uint64_t first, int64_t samples) const;
  void fill_batch(Tensor& inputs, Tensor& targets, data::SampleStream& stream, uint64_t first,
                  bool sequential);
  StepMetrics make_metrics(double loss, double lr, double norm, double seconds);
  // A measured peak below the `achieved` model FLOP/s: measured again, the larger kept.
  void raise_measured_peak(double achieved);

  // Everything, in order (trainer_build.cpp): the pieces below, then the GEMM rate.
  void build();
  // dp inferred, the rates scaled for the global batch, the layout and sharding checked.
  void resolve_and_validate_layout();
  void apply_communicator_options();  // parallel.timeout_s and check_collectives
  // data.tokenizer; model.vocab_size resolved from it (and kept in config_json_).
  void load_tokenizer();
  void install_oom_advice();  // the advisor on the allocator, once the vocabulary is known
  // Rank 0 prepares and checks the shards, then the others map them; rank 0 sets
  // `fingerprints` ({"tokenizer": ..., "data": ...}, fingerprint.h) for the checkpoints.
  data::Dataset open_data(nlohmann::json& fingerprints);
  void start_tracer();  // log.trace: this rank's tracer on the world
  void build_dims();
  // The layout of the config as the model takes it (model::parallel_options).
  model::ParallelOptions parallel_options() const;
  // This rank's chunks, the swap space when offloading, and the ParallelGPT over them.
  void build_model(model::ParallelOptions po);
  void build_optimizer();    // AdamW, initialised from train.seed; the parameters synchronised
  void build_loss_scaler();  // fp16 only
  void allocate_buffers();   // the training and evaluation batches
  void choose_gemm_lowp();   // kAuto's 16-bit GEMM path, measured on this run's shapes
  void run_steps();          // run() but for keeping the swap files on an error
  int agreed_stop_signal();  // the first stop signal of any rank, on every rank (0: none)
  void stop_at_signal(
      const std::pair<int64_t, std::string>& saved);  // saves, unless `saved` is this step's
  void probe_links(StepMetrics& m);  // the link probe's rates and slow hosts into m (rank 0)
  void log_hosts() const;            // the host map, on rank 0
  void log_start();                  // the start-up lines, on rank 0
  // Before the model states are allocated: kOutOfMemory when their bytes alone (a lower
  // bound: padding left out) exceed train.mem_limit, at once rather than after the
  // minutes of zero-filling that reaching the limit takes on a big model.
  void check_model_states_fit() const;
  // offload.optimizer = nvme: this rank's swap space (swap_), before the model's cuts.
  void open_swap_space();
  // The optimizer's states on their tier: offload.* (nothing offloaded: in memory).
  optim::StateOffload make_state_offload();
  // Every rank resolved the same config: compares a hash of config_json over the world
  // (kConfig naming the ranks that differ and the first differing key).
  void check_same_config();
  // Counts the consecutive steps without progress (a non-finite loss, or an update skipped
  // for non-finite gradients that no loss-scale back-off can cure); kConfig at
  // train.max_nonfinite_steps of them.
  void count_nonfinite(const StepMetrics& m, int64_t& count) const;
  void build_detaching_tracer();  // build(); on failure unsets the world's tracer
  void add_comm_stats(StepMetrics& m);

  RunConfig cfg_;
  std::string config_json_;
  std::unique_ptr<comm::Communicator> own_world_;  // single process
  comm::Communicator* world_;
  // Outlives the communicators and the model that record into it.
  std::unique_ptr<Tracer> tracer_;
  bool trace_written_ = false;
  Allocator allocator_;
  OomAdvisor advisor_;
  std::unique_ptr<parallel::ParallelDims> dims_;
  // Across hosts with parallel.link_probe_every > 0: names a host whose link is slow.
  std::unique_ptr<parallel::LinkProbe> link_probe_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::SampleStream> train_stream_, val_stream_;
  // offload.optimizer = nvme: this rank's swap files; outlives the sharding engine and the
  // optimizer that use them.
  std::unique_ptr<offload::SwapSpace> swap_;
  // The model (this rank's chunks of it) outlives the cuts applied to it
  // (ParallelGPT unhooks itself).
  std::vector<std::unique_ptr<model::GPT<float>>> chunks_;
  std::unique_ptr<model::ParallelGPT> parallel_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::DynamicLossScaler> scaler_;
  // Built with the optimizer; it holds the async writer's staging buffers (allocator_'s) and
  // references to the tokenizer, model and optimizer, so it is declared after them and
  // destroyed first.
  std::unique_ptr<CheckpointManager> checkpoints_;
  Tensor inputs_, targets_;            // [micro_batch x microbatches, T] I32
  Tensor eval_inputs_, eval_targets_;  // [micro_batch, T] I32
  int64_t step_ = 0;
  Stop stop_;
  bool verbose_progress_ = false;
  uint64_t data_position_ = 0;  // samples of the training stream consumed
  double peak_flops_ = 0;       // per rank; 0 = not measured yet
  std::string peak_source_;
  bool peak_given_ = false;       // --peak-flops: used exactly, never raised
  bool peak_remeasured_ = false;  // raise_measured_peak measured once already
  double gemm_flops_ = 0;         // the fp32 GEMM rate measured at start, per rank
  std::string gemm_lowp_note_;    // the 16-bit GEMM path and its rates ("" in fp32)
  std::string gemm_lowp_path_;    // its short name for metrics ("onednn", "via_f32")
  bool mfu_warned_ = false;
  std::function<void(uint64_t, int64_t)> sample_observer_;
};

}  // namespace kiri::train
