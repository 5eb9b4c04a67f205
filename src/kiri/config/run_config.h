#pragma once
// Everything a run is configured by. The command line's schema
// (config/config_schema.cpp) maps the dotted keys of config files and --set onto
// these fields; docs/config.md documents each key. On base alone (config/).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/config/adamw_config.h"
#include "kiri/config/gpt_config.h"
#include "kiri/config/io_engine.h"
#include "kiri/config/layout.h"
#include "kiri/config/lr_schedule.h"

namespace kiri {

// How train.lr and train.min_lr follow the global batch B: x 1, x B/base_batch,
// x sqrt(B/base_batch).
enum class LrScaling { kNone, kLinear, kSqrt };

struct DataConfig {
  // A name under data.assets ("moby-dick") or a path to a UTF-8 text or JSON Lines file.
  std::string corpus = "moby-dick";
  std::string tokenizer = "gpt2";  // "gpt2" (BPE, vocab 50257) or "byte" (vocab 257)
  std::string dir;  // a folder of token shards to train on (kiri, nanoGPT, llm.c); excludes corpus
  std::string assets;  // tokenizer files and the default corpus; default: the bootstrap's data/
  double val_fraction = 0.1;  // the last fraction of the tokens is the validation split
};

struct TrainConfig {
  int64_t steps = 200;
  // > 0: passes over the training split, which set steps when the data is known (the
  // trainer: ceil(epochs x samples / global batch)); 0: steps as given.
  double epochs = 0;
  int64_t micro_batch = 8;
  int64_t seq_len = 128;
  int64_t grad_accum = 1;
  double min_lr = 6e-5;
  LrScaling lr_scaling = LrScaling::kNone;
  int64_t base_batch = 0;  // sequences at which lr/min_lr are given; 0: this run's batch
  int64_t warmup = 20;
  // train.lr_schedule (lr_schedule.h): the decay after warm-up, ending at decay_steps
  // (0: steps); warmup_type and warmup_lr shape the DeepSpeed schedules' warm-up.
  LrSchedule lr_schedule = LrSchedule::kCosine;
  int64_t decay_steps = 0;
  WarmupType warmup_type = WarmupType::kLinear;
  double warmup_lr = 0;
  uint64_t seed = 1337;
  Precision dtype = Precision::kFp32;  // the layout's precision (config/layout.h)
  int64_t eval_every = 50;             // 0: only at the end
  int64_t eval_batches = 8;
  std::string mem_limit;  // "" or a byte size ("2GiB"): the allocator's limit
  AdamWConfig optimizer;
  // fp16 loss scaling: loss_scale 0 = dynamic (starting at 2^initial_scale_power,
  // halved on overflow, doubled after loss_scale_window clean steps), > 0 = static.
  double loss_scale = 0;
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  double min_loss_scale = 1;
  // Consecutive steps with a non-finite loss (or a skipped update the loss scaler cannot
  // cure) that stop the run; 0: never stop.
  int64_t max_nonfinite_steps = 10;
};

// The run folder: config.json, metrics, plot and checkpoints of one run. The path
// keys below may hold "{run.dir}" (run.dir "{run.name}"), resolve_run_paths
// substitutes it.
struct RunDirConfig {
  std::string name = "kiri";
  std::string dir = "runs/{run.name}";
};

struct CheckpointConfig {
  std::string dir = "{run.dir}/checkpoints";
  int64_t every = 0;  // steps between checkpoints; 0: only at the end
  int keep_last = 2;  // step directories kept; 0 keeps all
  // Stage this rank's part in memory and write the files from a background thread
  // (checkpoint_async.h) instead of stopping training for the whole save.
  bool async = false;
  // Above it the model is written as model-0000k-of-0000n.safetensors + index (as HF does)
  std::string max_shard_size = "5GB";
  // Save and resume move the states and weights in pieces of at most this (checkpoint_stream.h)
  std::string piece_size = "64MiB";
};

// Where the training state lives (docs/offload.md): the layout's tiers (OffloadTier). On
// the CPU backend device and host memory are the same RAM, so the tier that moves state
// off is NVMe: files under `path`. kAuto: offload.gradients only.

struct OffloadConfig {
  OffloadTier optimizer = OffloadTier::kNone;   // fp32 master weights, Adam m and v
  OffloadTier parameters = OffloadTier::kNone;  // ZeRO stage 3: the parameter shards
  OffloadTier gradients = OffloadTier::kAuto;   // ZeRO stage 2-3: the gradient shards
  std::string path = "{run.dir}/offload";       // swap files: <path>/rank<R>/...
  int buffer_count = 4;                         // aligned staging buffers per rank
  double buffer_mb = 64;                        // size of each (MiB)
  std::string block_size = "1MiB";              // bytes per I/O request and per checksum
  int queue_depth = 8;                          // requests in flight per rank
  IoEngine engine = IoEngine::kAuto;
};

struct LogConfig {
  std::string metrics = "{run.dir}/metrics.jsonl";  // one JSON line per step; "" disables
  std::string plot;                                 // loss-curve PNG; "" = metrics with .png
  int64_t every = 1;                                // steps between progress lines
  bool csv = false;          // {run.dir}/metrics.csv: one row of scalars per step
  bool tensorboard = false;  // a TensorBoard event file in run.dir, the same scalars
  // Chrome trace (docs/trace.md); "" disables; several ranks: FILE.rank<R>.ext. A relative
  // path lies in run.dir (resolve_run_paths); the key's `true` is {run.dir}/trace.json.
  std::string trace;
};

struct RunConfig {
  RunDirConfig run;
  GPTConfig model;
  DataConfig data;
  TrainConfig train;
  Layout parallel{.dp = 0};  // dp 0: inferred, world / (tp x pp) (resolve_layout)
  CheckpointConfig checkpoint;
  OffloadConfig offload;
  LogConfig log;
};

// The defaults of every key; model.vocab_size = 0 means "the tokenizer's".
inline RunConfig default_run_config() {
  RunConfig c;
  c.model.vocab_size = 0;
  return c;
}

// The config with "{run.name}" in run.dir and "{run.dir}" in checkpoint.dir,
// log.metrics, log.plot and log.trace replaced (kConfig for an empty run.name or
// run.dir, or a name with '/'), and a relative log.trace put inside run.dir (one that
// already lies there, as "runs/kiri/trace.json" for run.dir "runs/kiri", is kept).
// Idempotent.
RunConfig resolve_run_paths(RunConfig c);
// The loss plot's path: log.plot, else log.metrics with .png ("" for neither).
std::string plot_path(const LogConfig& log);

// What resolve() resolves a config against. 0 (false): not known yet, and the sentinel it
// would resolve stays as it is.
struct ResolveFacts {
  int64_t tokenizer_vocab = 0;  // model.vocab_size 0 takes the tokenizer's vocabulary
  std::string tokenizer = {};   // its name, for the message
  int world = 0;                // parallel.dp 0 becomes world / (tp x pp); a given dp is checked
  // train.lr_scaling applied for the global batch (needs the world): the trainer's alone, as a
  // config that is printed (--dry-run) or stored in a checkpoint keeps the rates it was given.
  bool learning_rate = false;
};

// What resolve() changed, a line each for the log ("" or nullopt: nothing to say).
struct Resolution {
  std::optional<std::string> layout;  // "layout: dp 4 inferred = world 8 / (tp 2 x pp 1)"
  std::string learning_rate;          // scale_learning_rate's line
};

// The one place where a config's sentinels take their values: model.vocab_size 0 (the
// tokenizer's vocabulary; a given one smaller than it is a kConfig error naming both),
// parallel.dp 0 (resolve_layout) and train.lr_scaling (scale_learning_rate, for
// global_batch(c)). Idempotent: a resolved config resolves to itself.
Resolution resolve(RunConfig& c, const ResolveFacts& facts);

// resolve()'s layout part: parallel.dp = 0 becomes world / (tp x pp), with the note that says
// so (nullopt when dp was given). A world that tp x pp does not divide, or a given dp with
// dp x tp x pp != world, is a kConfig error naming world, dp, tp and pp.
std::optional<std::string> resolve_layout(Layout& p, int world_size);

// What the layout is checked against: the model's layers, heads and MLP width, the rows of
// a micro-batch, and the world (0: not known yet).
LayoutFacts layout_facts(const RunConfig& c, int world = 0);
// validate_layout(c.parallel, layout_facts(c, world), offload_spec(c.offload)): every layout
// rule.
void check_layout(const RunConfig& c, int world = 0);

// Sequences per optimizer step: micro_batch x microbatches x grad_accum x dp (dp resolved).
int64_t global_batch(const RunConfig& c);

// Applies train.lr_scaling for a run of `batch` sequences per step: lr and min_lr
// times batch/base_batch (linear) or its square root (sqrt), then base_batch =
// batch, so applying it again changes nothing. Returns the line that says so (""
// for lr_scaling none).
std::string scale_learning_rate(TrainConfig& t, int64_t batch);

}  // namespace kiri
