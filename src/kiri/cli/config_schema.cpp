#include "kiri/cli/config_schema.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "kiri/base/file_read.h"
#include "kiri/base/suggest.h"
#include "kiri/base/units.h"
#include "kiri/cli/config_field.h"
#include "kiri/cli/config_file.h"
#include "kiri/parallel/pp/schedule.h"
#include "kiri/train/checkpoint_state.h"
#include "kiri/train/offload_config.h"

namespace kiri::cli {

using nlohmann::json;
using train::RunConfig;

namespace {

// parallel.recompute_modules: a JSON list of names, or as --set text the names separated by
// commas (`core_attn,mlp_act`) or a JSON list; each checked against the modules kiri has.
Field recompute_modules_field() {
  const std::string key = "parallel.recompute_modules";
  std::string valid;
  for (const std::string& n : kiri::recompute_module_names())
    valid += (valid.empty() ? "" : ", ") + n;
  Field f;
  f.doc = {key, "list of strings", "",
           "selective: what every block recomputes in backward instead of keeping: `core_attn` "
           "(the attention core's output and log-sum-exp), `layernorm` (the norms' outputs, "
           "under sequence parallelism all-gathered again), `mlp_act` (the MLP activation's "
           "output). Empty: [\"core_attn\"], Megatron-core's default. One of: " +
               valid + "."};
  f.set = [key](train::RunConfig& c, const json& v) {
    json list = v;
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      list = json::array();
      if (!s.empty() && s.front() == '[') {
        list = json::parse(s, nullptr, false);
      } else {
        size_t at = 0;
        while (at <= s.size() && !s.empty()) {
          const size_t comma = std::min(s.find(',', at), s.size());
          list.push_back(s.substr(at, comma - at));
          at = comma + 1;
        }
      }
    }
    KIRI_CHECK_KIND(kConfig, list.is_array(), key, " must be a list of module names, got ",
                    quote_bounded(v.dump(), 80));
    std::vector<std::string> names;
    for (const json& n : list) names.push_back(as_string(n, key));
    kiri::parse_recompute_modules(names, kiri::LayoutWords::kConfig);  // unknown: the valid ones
    c.parallel.recompute_modules = names;
  };
  f.get = [](const train::RunConfig& c) { return json(c.parallel.recompute_modules); };
  return f;
}

// train.loss_scale: a static scale S multiplies every gradient before it is stored in fp16,
// whose finite numbers span 2^-24 (the smallest subnormal) to 65504. Above 65504 x 2^24 even
// the smallest gradient fp16 holds overflows once scaled: every step would be skipped, and the
// run then stopped as diverged. The bound is that product, S x 2^-24 <= 65504.
constexpr double kMaxStaticLossScale = 65504.0 * 16777216.0;  // 1098974756864

Field loss_scale_field() {
  Field f = float_field("train.loss_scale", KIRI_FIELD(train.loss_scale), 0, 1e30,
                        "fp16 only. 0: dynamic loss scaling (start at 2^initial_scale_power, "
                        "skip the step and halve on inf/NaN gradients, double after "
                        "loss_scale_window clean steps); > 0: this static scale, at most "
                        "65504 x 2^24 = 1098974756864 (above it every fp16 gradient overflows).");
  const auto range = f.set;
  f.set = [range](train::RunConfig& c, const json& v) {
    range(c, v);
    const double s = c.train.loss_scale;
    KIRI_CHECK_KIND(kConfig, s <= kMaxStaticLossScale, "train.loss_scale = ", s,
                    " is an impossible static loss scale: above 65504 x 2^24 = 1098974756864 even "
                    "fp16's smallest gradient, 2^-24, overflows fp16's largest number, 65504, "
                    "once scaled, so every step would be skipped; give at most 1098974756864 "
                    "(2^16 = 65536 is the usual), or 0 for dynamic scaling");
  };
  return f;
}

std::vector<Field> make_fields() {
  constexpr int64_t kBig = int64_t{1} << 40;
  std::vector<Field> f;
  // run
  f.push_back(string_field("run.name", KIRI_FIELD(run.name),
                           "The run's name: the folder of run.dir's default."));
  f.push_back(string_field(
      "run.dir", KIRI_FIELD(run.dir),
      "The run folder: `config.json` (the resolved config, written at the start), the "
      "metrics, the loss plot and the checkpoints. `{run.name}` is replaced by run.name, and "
      "`{run.dir}` in checkpoint.dir, log.metrics, log.plot and log.trace by this folder; a "
      "path given without it is taken as given. A fresh run refuses a folder that holds "
      "another run's checkpoints or metrics: continue it with `--resume auto` or start over "
      "with `--overwrite` (docs/checkpoints.md)."));
  add_model_fields(f);  // config_model_fields.cpp
  // data
  f.push_back(
      string_field("data.corpus", KIRI_FIELD(data.corpus),
                   "Training text: `moby-dick` (under data.assets) or a UTF-8 text or JSON Lines "
                   "file, tokenized once into shards beside it."));
  f.push_back(string_field(
      "data.tokenizer", KIRI_FIELD(data.tokenizer),
      "`gpt2`: GPT-2's byte-level BPE (vocab 50257); `byte`: one token per byte and "
      "end-of-text 256 (vocab 257); or the path of a Hugging Face tokenizer: a folder with "
      "tokenizer.json or vocab.json + merges.txt, or a tokenizer.json file (docs/data.md).",
      [](const std::string& s) {
        // As make_tokenizer tells a path from a name (the files are read at training).
        if (s != "gpt2" && s != "byte" && s.find('/') == std::string::npos &&
            !s.ends_with(".json") && !std::filesystem::exists(s))
          KIRI_RAISE(kConfig,
                     "data.tokenizer must be gpt2 | byte | the path of a Hugging Face "
                     "tokenizer, got '",
                     quote_bounded(s, 80), "'");
      }));
  f.push_back(string_field("data.dir", KIRI_FIELD(data.dir),
                           "Folder of token shards to train on: `kiri data --out`'s, nanoGPT's "
                           "train.bin/val.bin or llm.c's .bin shards (docs/data.md). Excludes "
                           "data.corpus."));
  f.push_back(string_field("data.assets", KIRI_FIELD(data.assets),
                           "Folder of the tokenizer files and the default corpus; empty: "
                           "$KIRI_DATA_DIR, else the folder scripts/bootstrap.sh fills (data/)."));
  f.push_back(float_field("data.val_fraction", KIRI_FIELD(data.val_fraction), 1e-6, 0.5,
                          "Fraction of the tokens (the last ones) held out for validation."));
  // train
  f.push_back(int_field("train.steps", KIRI_FIELD(train.steps), 0, kBig, "Optimizer steps."));
  f.push_back(int_field("train.micro_batch", KIRI_FIELD(train.micro_batch), 1, 1 << 20,
                        "Sequences per micro-batch (per rank)."));
  f.push_back(
      int_field("train.seq_len", KIRI_FIELD(train.seq_len), 1, 1 << 20,
                "Tokens per sequence. Fixed by a checkpoint like the model's shape: the data "
                "position counts sequences of this length."));
  f.push_back(int_field("train.grad_accum", KIRI_FIELD(train.grad_accum), 1, 1 << 20,
                        "Micro-batches per optimizer step; global_batch = micro_batch x dp x "
                        "grad_accum sequences."));
  f.push_back(float_field("train.lr", KIRI_FIELD(train.optimizer.lr), 0, 10,
                          "Peak learning rate (after warm-up)."));
  f.push_back(float_field("train.min_lr", KIRI_FIELD(train.min_lr), 0, 10,
                          "Learning rate at the end of the cosine decay."));
  f.push_back(enum_field(
      "train.lr_scaling", KIRI_FIELD(train.lr_scaling),
      std::vector<std::pair<std::string, train::LrScaling>>{{"none", train::LrScaling::kNone},
                                                            {"linear", train::LrScaling::kLinear},
                                                            {"sqrt", train::LrScaling::kSqrt}},
      "How train.lr and train.min_lr follow the global batch B (sequences per step, known "
      "once the layout is): `linear` multiplies both by B / train.base_batch, `sqrt` by its "
      "square root (the schedule keeps its shape); `none` leaves them. Rank 0 prints the "
      "scaled rates; the metrics' `lr` is the scaled one. Checkpoints keep the rates as "
      "given, so a run resumed on another layout scales them for its own batch."));
  f.push_back(int_field("train.base_batch", KIRI_FIELD(train.base_batch), 0, kBig,
                        "The global batch in sequences at which train.lr and train.min_lr are "
                        "given (train.lr_scaling); 0: this run's own batch (no change)."));
  f.push_back(int_field("train.warmup", KIRI_FIELD(train.warmup), 0, kBig,
                        "Steps of warm-up (the DeepSpeed schedules: at least 2)."));
  f.push_back(enum_field(
      "train.lr_schedule", KIRI_FIELD(train.lr_schedule),
      std::vector<std::pair<std::string, train::LrSchedule>>{
          {"cosine", train::LrSchedule::kCosine},
          {"linear", train::LrSchedule::kLinear},
          {"constant", train::LrSchedule::kConstant},
          {"ds_warmup", train::LrSchedule::kDsWarmup},
          {"ds_warmup_decay", train::LrSchedule::kDsWarmupDecay},
          {"ds_warmup_cosine", train::LrSchedule::kDsWarmupCosine}},
      "The learning rate per step. `cosine`, `linear`, `constant`: train.lr x (step+1) / "
      "train.warmup during warm-up, then a cosine or linear decay to train.min_lr at "
      "train.decay_steps, or none. `ds_warmup`, `ds_warmup_decay`, `ds_warmup_cosine`: "
      "DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR, formula for formula "
      "(docs/deepspeed.md): from train.warmup_lr to train.lr (train.warmup_type), then "
      "constant, linear or cosine to train.min_lr."));
  f.push_back(int_field("train.decay_steps", KIRI_FIELD(train.decay_steps), 0, kBig,
                        "The step at which the decay reaches train.min_lr (DeepSpeed's "
                        "total_num_steps); 0: train.steps."));
  f.push_back(
      enum_field("train.warmup_type", KIRI_FIELD(train.warmup_type),
                 std::vector<std::pair<std::string, train::WarmupType>>{
                     {"linear", train::WarmupType::kLinear}, {"log", train::WarmupType::kLog}},
                 "The ds_* schedules' warm-up curve: `linear` or DeepSpeed's `log` (log(i+1) / "
                 "log(warmup)). kiri's own schedules warm up linearly."));
  f.push_back(float_field("train.warmup_lr", KIRI_FIELD(train.warmup_lr), 0, 10,
                          "The ds_* schedules' first learning rate, where warm-up starts "
                          "(DeepSpeed's warmup_min_lr; WarmupCosineLR: warmup_min_ratio x lr)."));
  f.push_back(
      float_field("train.weight_decay", KIRI_FIELD(train.optimizer.weight_decay), 0, 10,
                  "AdamW decoupled weight decay, applied to matrices and embeddings only."));
  f.push_back(
      float_field("train.beta1", KIRI_FIELD(train.optimizer.beta1), 0, 0.999999, "AdamW beta1."));
  f.push_back(float_field("train.beta2", KIRI_FIELD(train.optimizer.beta2), 0, 0.999999999,
                          "AdamW beta2."));
  f.push_back(float_field("train.eps", KIRI_FIELD(train.optimizer.eps), 0, 1, "AdamW epsilon."));
  f.push_back(float_field("train.grad_clip", KIRI_FIELD(train.optimizer.grad_clip), 0, 1e30,
                          "Clip the global gradient L2 norm to this; 0 disables."));
  f.push_back(int_field("train.seed", KIRI_FIELD(train.seed), 0, kBig,
                        "Seed of the initialisation and of the data order."));
  f.push_back(enum_field(
      "train.dtype", KIRI_FIELD(train.dtype),
      std::vector<std::pair<std::string, train::ComputeDType>>{{"fp32", train::ComputeDType::kF32},
                                                               {"bf16", train::ComputeDType::kBF16},
                                                               {"fp16", train::ComputeDType::kF16}},
      "Parameters and gradients used in compute. `bf16`/`fp16`: mixed precision: 2-byte "
      "parameters and gradients, 16-bit GEMMs with fp32 accumulation, fp32 activations, and "
      "fp32 master weights, m and v in the optimizer (16 bytes per parameter in all). `fp16` "
      "adds loss scaling (train.loss_scale)."));
  f.push_back(loss_scale_field());
  f.push_back(int_field("train.initial_scale_power", KIRI_FIELD(train.initial_scale_power), 0, 120,
                        "fp16, dynamic: the first loss scale is 2 to this power."));
  f.push_back(int_field("train.loss_scale_window", KIRI_FIELD(train.loss_scale_window), 1, kBig,
                        "fp16, dynamic: clean steps in a row before the scale doubles."));
  f.push_back(float_field("train.min_loss_scale", KIRI_FIELD(train.min_loss_scale), 1e-30, 1e30,
                          "fp16, dynamic: the scale never backs off below this."));
  f.push_back(int_field(
      "train.max_nonfinite_steps", KIRI_FIELD(train.max_nonfinite_steps), 0, kBig,
      "Consecutive steps without progress that stop the run with an error (before any "
      "checkpoint of their weights): a non-finite loss, or an update skipped for non-finite "
      "gradients, which under fp16 counts only once the dynamic loss scale is at "
      "train.min_loss_scale (or static). 0: never stop."));
  f.push_back(int_field("train.eval_every", KIRI_FIELD(train.eval_every), 0, kBig,
                        "Steps between validation evaluations; 0: only at the end."));
  f.push_back(int_field("train.eval_batches", KIRI_FIELD(train.eval_batches), 1, 1 << 20,
                        "Micro-batches of the validation split per evaluation."));
  f.push_back(string_field("train.mem_limit", KIRI_FIELD(train.mem_limit),
                           "Per-process memory limit of kiri's allocator (e.g. `2GiB`); passing it "
                           "raises an out-of-memory error with the breakdown by category. Empty: "
                           "no limit. Also `--mem-limit`.",
                           [](const std::string& s) {
                             if (!s.empty()) parse_bytes(s);
                           }));
  // parallel
  f.push_back(int_field("parallel.dp", KIRI_FIELD(parallel.dp), 0, 1 << 20,
                        "Data-parallel degree; 0 (unset) infers it as world / (tp x pp), as "
                        "Megatron and torchtitan do, and rank 0 says so (`kiri config` prints "
                        "0). dp x tp x pp must equal the number of processes: a world that tp x "
                        "pp does not divide, or a given dp that does not fit it, is an error "
                        "naming world, dp, tp and pp."));
  f.push_back(
      int_field("parallel.tp", KIRI_FIELD(parallel.tp), 1, 1 << 20, "Tensor-parallel degree."));
  f.push_back(
      int_field("parallel.pp", KIRI_FIELD(parallel.pp), 1, 1 << 20, "Pipeline-parallel degree."));
  f.push_back(float_field("parallel.bucket_mb", KIRI_FIELD(parallel.bucket_mb), 1e-6, 1e6,
                          "DDP gradient bucket size in MiB; each bucket's all-reduce starts as "
                          "soon as backward has produced all of its gradients."));
  f.push_back(float_field("parallel.timeout_s", KIRI_FIELD(parallel.timeout_s), 0.001, 1e7,
                          "Timeout of each collective in seconds: past it the rank stops with a "
                          "diagnosis naming the missing or divergent rank."));
  f.push_back(bool_field("parallel.check_collectives", KIRI_FIELD(parallel.check_collectives),
                         "Before each collective, ranks agree on its kind and size, so a mismatch "
                         "is named instead of computing garbage (a small extra message each)."));
  f.push_back(int_field("parallel.zero_stage", KIRI_FIELD(parallel.zero_stage), 0, 3,
                        "ZeRO stage (DeepSpeed): 0 = DDP, every rank holds everything; 1 = "
                        "optimizer states sharded over dp; 2 = + gradients (reduce-scattered "
                        "during backward); 3 = + parameters (all-gathered per unit just in time; "
                        "= FSDP FULL_SHARD)."));
  f.push_back(enum_field(
      "parallel.sharding_strategy", KIRI_FIELD(parallel.sharding_strategy),
      std::vector<std::pair<std::string, std::string>>{{"from_zero_stage", ""},
                                                       {"NO_SHARD", "NO_SHARD"},
                                                       {"SHARD_GRAD_OP", "SHARD_GRAD_OP"},
                                                       {"FULL_SHARD", "FULL_SHARD"},
                                                       {"HYBRID_SHARD", "HYBRID_SHARD"}},
      "The same engine in FSDP's words: NO_SHARD = stage 0, SHARD_GRAD_OP = stage 2, "
      "FULL_SHARD = stage 3, HYBRID_SHARD = stage 3 within groups of "
      "parallel.shard_group_size ranks, replicated across the groups. A zero_stage that "
      "contradicts it is an error."));
  f.push_back(int_field("parallel.shard_group_size", KIRI_FIELD(parallel.shard_group_size), 0,
                        1 << 20,
                        "Ranks over which the state is sharded (HYBRID_SHARD); 0 = the whole dp "
                        "group. Must divide parallel.dp."));
  f.push_back(int_field("parallel.wrap_blocks", KIRI_FIELD(parallel.wrap_blocks), 1, 1 << 20,
                        "Wrap policy of the sharding units: the embeddings, then every "
                        "wrap_blocks transformer blocks, then the final LayerNorm, each one flat "
                        "buffer padded to a multiple of the shard group size."));
  f.push_back(bool_field("parallel.prefetch", KIRI_FIELD(parallel.prefetch),
                         "Stage 3: start the next unit's all-gather while the current unit "
                         "computes (forward and backward)."));
  f.push_back(enum_field(
      "parallel.activation_checkpointing", KIRI_FIELD(parallel.activation_checkpointing),
      std::vector<std::pair<std::string, train::ActivationCheckpointing>>{
          {"none", train::ActivationCheckpointing::kNone},
          {"full", train::ActivationCheckpointing::kFull},
          {"every_k", train::ActivationCheckpointing::kEveryK},
          {"selective", train::ActivationCheckpointing::kSelective}},
      "Checkpointed blocks keep only their input in forward and recompute their activations "
      "in backward: `full` = every block, `every_k` = blocks 0, k, 2k, ... "
      "(parallel.activation_checkpointing_k); `selective` = every block keeps its linear "
      "layers' inputs and recomputes only parallel.recompute_modules (docs/parallelism.md)."));
  f.push_back(recompute_modules_field());
  f.push_back(int_field("parallel.activation_checkpointing_k",
                        KIRI_FIELD(parallel.activation_checkpointing_k), 1, 1 << 20,
                        "every_k: checkpoint every k-th block."));
  f.push_back(bool_field(
      "parallel.sequence_parallel", KIRI_FIELD(parallel.sequence_parallel),
      "Megatron's sequence parallelism (needs parallel.tp > 1): the norms and the residual "
      "stream hold micro_batch x seq_len / tp token rows per tensor-parallel rank (tp must "
      "divide them); an all-gather enters each attention and MLP and a reduce-scatter leaves "
      "it, in place of tensor parallelism's all-reduces (the same bytes; the norms' weight "
      "gradients add one small all-reduce per block and micro-batch). "
      "docs/parallelism.md."));
  f.push_back(enum_field(
      "parallel.schedule", KIRI_FIELD(parallel.schedule),
      std::vector<std::pair<std::string, std::string>>{
          {"gpipe", "gpipe"}, {"1f1b", "1f1b"}, {"interleaved", "interleaved"}},
      "Pipeline schedule (pp > 1): `gpipe` (all forwards, then all backwards: holds m "
      "micro-batches), `1f1b` (one forward, one backward: holds at most pp), `interleaved` "
      "(1F1B over parallel.virtual_stages chunks per rank: the bubble shrinks by that factor)."));
  f.push_back(
      int_field("parallel.microbatches", KIRI_FIELD(parallel.microbatches), 1, 1 << 20,
                "Micro-batches m per accumulation step: each rank's rows are micro_batch x "
                "m, run through the pipeline one micro-batch at a time; the pipeline's "
                "bubble is (pp-1)/(m+pp-1). global_batch = micro_batch x m x grad_accum x dp."));
  f.push_back(int_field("parallel.virtual_stages", KIRI_FIELD(parallel.virtual_stages), 1, 1 << 10,
                        "Interleaved schedule: model chunks per pipeline rank (v); the layers are "
                        "cut into pp x v chunks, chunk c on rank c % pp."));
  // checkpoint
  f.push_back(
      string_field("checkpoint.dir", KIRI_FIELD(checkpoint.dir),
                   "Checkpoint root: step directories and a `latest` pointer; empty disables "
                   "checkpoints. `{run.dir}` is run.dir."));
  f.push_back(int_field("checkpoint.every", KIRI_FIELD(checkpoint.every), 0, kBig,
                        "Steps between checkpoints; 0: only at the end of the run."));
  f.push_back(int_field("checkpoint.keep_last", KIRI_FIELD(checkpoint.keep_last), 0, 1 << 20,
                        "Step directories to keep; 0 keeps all. The older ones are removed only "
                        "once the newer checkpoint is complete and `latest` names it."));
  f.push_back(bool_field(
      "checkpoint.async", KIRI_FIELD(checkpoint.async),
      "Asynchronous saves: training stops only while this rank copies its part (rank 0: the "
      "fp32 model; the optimizer-file writers: m and v) into staging buffers (the `buffers` "
      "category, reused), and a background thread writes the files; `latest` moves once every "
      "rank's files are complete and fsynced. A save waits for the previous one; a failed one "
      "is an error at the next step, the previous checkpoint intact (docs/checkpoints.md)."));
  f.push_back(string_field(
      "checkpoint.piece_size", KIRI_FIELD(checkpoint.piece_size),
      "Largest piece of the optimizer's states and the weights that saving or resuming a "
      "checkpoint holds in memory at once (at least 4KiB): they are streamed, from and into "
      "any tier (offload.*), never whole (docs/checkpoints.md).",
      [](const std::string& s) {
        KIRI_CHECK_KIND(kConfig, parse_bytes(s) >= 4096,
                        "checkpoint.piece_size must be a size of at least 4KiB (e.g. 64MiB), got '",
                        quote_bounded(s, 80), "'");
      }));
  f.push_back(string_field(
      "checkpoint.max_shard_size", KIRI_FIELD(checkpoint.max_shard_size),
      "Largest model file of a checkpoint, as transformers' save_pretrained reads it (5GB = "
      "5e9 bytes, 2GiB = 2^31): a bigger model is written as model-0000k-of-0000n.safetensors "
      "with model.safetensors.index.json (docs/checkpoints.md).",
      // As train::parse_max_shard_size reads it (not called: the fuzz build's readers link
      // no checkpoint code).
      [](const std::string& s) {
        KIRI_CHECK_KIND(kConfig, parse_bytes(s) > 0,
                        "checkpoint.max_shard_size must be a positive size (e.g. 5GB, 2GiB), got '",
                        quote_bounded(s, 80), "'");
      }));
  // offload
  const std::vector<std::pair<std::string, train::OffloadDevice>> devices{
      {"none", train::OffloadDevice::kNone},
      {"cpu", train::OffloadDevice::kCpu},
      {"nvme", train::OffloadDevice::kNvme}};
  f.push_back(enum_field(
      "offload.optimizer", KIRI_FIELD(offload.optimizer), devices,
      "ZeRO-Offload: `nvme` keeps this rank's fp32 master weights, Adam m and v in swap files "
      "under offload.path and streams them through offload.buffer_count buffers in each step "
      "(any ZeRO stage and layout; docs/offload.md). `cpu` is an error on the CPU backend: "
      "host memory is already where the state is."));
  f.push_back(enum_field(
      "offload.parameters", KIRI_FIELD(offload.parameters), devices,
      "ZeRO-Infinity: `nvme` keeps this rank's parameter shards in swap files, read one unit "
      "ahead of their all-gather in forward and backward. ZeRO stage 3 with "
      "offload.optimizer = nvme only."));
  f.push_back(enum_field(
      "offload.gradients", KIRI_FIELD(offload.gradients),
      std::vector<std::pair<std::string, train::OffloadDevice>>{
          {"auto", train::OffloadDevice::kAuto},
          {"none", train::OffloadDevice::kNone},
          {"cpu", train::OffloadDevice::kCpu},
          {"nvme", train::OffloadDevice::kNvme}},
      "`nvme` writes each unit's reduced gradient shard to a swap file as soon as its "
      "reduction completes, and the optimizer reads it with its states (ZeRO stage 2 or 3 "
      "with offload.optimizer = nvme); `auto`: nvme when offload.parameters = nvme, else "
      "none."));
  f.push_back(string_field(
      "offload.path", KIRI_FIELD(offload.path),
      "Folder of the swap files (one subfolder per rank, locked against a second run); a "
      "local disk that takes O_DIRECT. `{run.dir}` is run.dir. Removed at a clean exit."));
  f.push_back(int_field("offload.buffer_count", KIRI_FIELD(offload.buffer_count), 2, 1024,
                        "Aligned staging buffers per rank: reads of the next chunk and writes of "
                        "the last overlap the update of this one from 3 up."));
  f.push_back(float_field("offload.buffer_mb", KIRI_FIELD(offload.buffer_mb), 0.0625, 1 << 20,
                          "Size of each staging buffer in MiB: one chunk of every offloaded "
                          "state of a unit."));
  f.push_back(string_field(
      "offload.block_size", KIRI_FIELD(offload.block_size),
      "Bytes per I/O request and per checksum (DeepSpeed's aio.block_size): a multiple of "
      "4 KiB, e.g. 1MiB.",
      [](const std::string& s) {
        const int64_t b = parse_bytes(s);
        KIRI_CHECK_KIND(kConfig, b >= 4096 && b % 4096 == 0 && b <= (int64_t{1} << 30),
                        "offload.block_size must be a multiple of 4 KiB up to 1 GiB, got '",
                        quote_bounded(s, 80), "'");
      }));
  f.push_back(int_field("offload.queue_depth", KIRI_FIELD(offload.queue_depth), 1, 1024,
                        "I/O requests in flight per rank (DeepSpeed's aio.queue_depth)."));
  f.push_back(enum_field(
      "offload.engine", KIRI_FIELD(offload.engine),
      std::vector<std::pair<std::string, train::IoEngine>>{{"auto", train::IoEngine::kAuto},
                                                           {"io_uring", train::IoEngine::kIoUring},
                                                           {"threads", train::IoEngine::kThreads}},
      "Asynchronous I/O: `io_uring` (liburing), `threads` (pread/pwrite on a "
      "thread pool), `auto` (the thread pool: it measured faster than io_uring on this "
      "machine's disk, docs/performance.md)."));
  // log
  f.push_back(
      string_field("log.metrics", KIRI_FIELD(log.metrics),
                   "Metrics file, one JSON line per step (docs/metrics.md); empty disables. "
                   "A resumed run keeps the rows up to its step and appends."));
  f.push_back(string_field("log.plot", KIRI_FIELD(log.plot),
                           "Loss-curve PNG written at the end from the whole metrics file (all "
                           "attempts of a resumed run); empty: the metrics path with .png."));
  f.push_back(
      int_field("log.every", KIRI_FIELD(log.every), 1, kBig, "Steps between progress lines."));
  f.push_back(string_field(
      "log.trace", KIRI_FIELD(log.trace),
      "Chrome trace of the run (JSON for Perfetto / chrome://tracing, docs/trace.md): "
      "forward, backward, optimizer, evaluation and every communication call per rank; with "
      "several ranks one file each, `.rank<R>` before the extension (runs/trace.rank3.json). "
      "Events are kept in memory until the end: trace short runs. Empty disables; "
      "`{run.dir}/trace.json` puts it in the run folder."));
  // Fill the defaults from a default-constructed config.
  RunConfig defaults = train::default_run_config();
  for (Field& x : f) {
    json v = x.get(defaults);
    x.doc.default_value = v.is_string() ? v.get<std::string>() : v.dump();
  }
  return f;
}

const std::vector<Field>& fields() {
  static const std::vector<Field> table = make_fields();
  return table;
}

const Field& find_field(const std::string& key) {
  for (const Field& f : fields())
    if (f.doc.key == key) return f;
  std::vector<std::string> keys;
  for (const Field& f : fields()) keys.push_back(f.doc.key);
  // No key is longer than 40 characters: a longer name gets no suggestion, whose edit
  // distance would take minutes for a 10 MB key.
  constexpr size_t kMaxSuggestedLength = 100;
  if (auto best = key.size() > kMaxSuggestedLength ? std::nullopt : closest(key, keys))
    KIRI_RAISE(kConfig, "unknown key '", quote_bounded(key, 120), "'; did you mean ", *best, "?");
  std::string section = key.substr(0, key.find('.'));
  std::string known;
  for (const Field& f : fields())
    if (f.doc.key.rfind(section + ".", 0) == 0) known += (known.empty() ? "" : ", ") + f.doc.key;
  KIRI_RAISE(kConfig, "unknown key '", quote_bounded(key, 120), "'",
             known.empty()
                 ? std::string(" (sections: run, model, data, train, parallel, checkpoint, log)")
                 : " (keys of '" + quote_bounded(section, 40) + "': " + known + ")");
}

std::pair<std::string, json> split_set(const std::string& kv) {
  const size_t eq = kv.find('=');
  KIRI_CHECK_KIND(kConfig, eq != std::string::npos && eq > 0,
                  "--set takes key=value (e.g. --set train.lr=3e-4), got '", quote_bounded(kv, 120),
                  "'");
  return {kv.substr(0, eq), json(kv.substr(eq + 1))};
}

void flatten(const json& j, const std::string& prefix,
             std::vector<std::pair<std::string, json>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object())
      flatten(*it, key, out);
    else
      out.emplace_back(key, *it);
  }
}

// The flattened (key, value) pairs, refusing a key given twice: a flat and a nested
// spelling ({"train.lr": 1, "train": {"lr": 2}}) that the parser cannot see. `where`
// names the file ("" for none).
std::vector<std::pair<std::string, json>> flat_entries(const json& j, const std::string& where) {
  std::vector<std::pair<std::string, json>> flat;
  flatten(j, "", flat);
  std::set<std::string> seen;
  for (const auto& [key, value] : flat)
    if (!seen.insert(key).second)
      KIRI_RAISE(kConfig, where.empty() ? "" : "config file '" + where + "': ", "key '",
                 quote_bounded(key, 120), "' is given twice (once flat, once nested)");
  return flat;
}

}  // namespace

std::vector<KeyDoc> config_keys() {
  std::vector<KeyDoc> out;
  for (const Field& f : fields()) out.push_back(f.doc);
  return out;
}

void apply_key(RunConfig& cfg, const std::string& key, const json& value) {
  const Field& f = find_field(key);
  try {
    f.set(cfg, value);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kConfig) throw;
    KIRI_RAISE(kConfig, key, ": ", e.message());  // e.g. a byte size that does not parse
  }
}

void apply_set(RunConfig& cfg, const std::string& kv) {
  const auto [key, value] = split_set(kv);
  apply_key(cfg, key, value);
}

RunConfig config_from_json(const json& j) {
  KIRI_CHECK_KIND(kConfig, j.is_object(), "a config must be a JSON object, got ", j.type_name());
  RunConfig cfg = train::default_run_config();
  for (auto& [k, v] : flat_entries(j, "")) apply_key(cfg, k, v);
  return cfg;
}

RunConfig parse_config_text(std::string_view text, const std::string& where) {
  const json j = parse_config_json(text, where);
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    KIRI_RAISE(kConfig, "in '", where, "': ", e.message());
  }
}

std::vector<std::pair<std::string, json>> config_entries(const std::string& file,
                                                         const std::vector<std::string>& sets) {
  std::vector<std::pair<std::string, json>> out;
  if (!file.empty()) {
    out = flat_entries(read_config_file(file), file);
  }
  for (const std::string& s : sets) out.push_back(split_set(s));
  for (const auto& [key, value] : out) find_field(key);  // unknown keys are named here
  return out;
}

json get_key(const RunConfig& cfg, const std::string& key) {
  return find_field(key).get(cfg);
}

RunConfig load_config(const std::string& file, const std::vector<std::string>& sets) {
  RunConfig cfg = train::default_run_config();
  if (!file.empty()) cfg = parse_config_text(read_config_text(file), file);
  for (const std::string& s : sets) apply_set(cfg, s);
  return cfg;
}

json config_to_json(const RunConfig& cfg) {
  json out = json::object();
  for (const Field& f : fields())
    out[json::json_pointer("/" + [&] {
      std::string p = f.doc.key;
      for (char& ch : p)
        if (ch == '.') ch = '/';
      return p;
    }())] = f.get(cfg);
  return out;
}

void validate(const RunConfig& cfg) {
  train::resolve_run_paths(cfg);  // names a bad run.name / run.dir
  model::GPTConfig m = cfg.model;
  if (m.vocab_size == 0) m.vocab_size = 2;  // resolved from the tokenizer later
  m.validate();
  KIRI_CHECK_KIND(kConfig, cfg.train.seq_len <= cfg.model.block_size,
                  "train.seq_len = ", cfg.train.seq_len,
                  " exceeds model.block_size = ", cfg.model.block_size);
  KIRI_CHECK_KIND(kConfig, cfg.train.min_lr <= cfg.train.optimizer.lr,
                  "train.min_lr = ", cfg.train.min_lr,
                  " exceeds train.lr = ", cfg.train.optimizer.lr);
  train::validate_offload(cfg);  // the I/O keys, all problems in one message
  // Every layout rule that needs no world, refused before any work (dp 0: inferred later).
  train::check_layout(cfg);
  train::selective_recompute(cfg.parallel);  // modules need `selective`; known names
  KIRI_CHECK_KIND(kConfig,
                  !cfg.checkpoint.async || (cfg.offload.optimizer != train::OffloadDevice::kNvme &&
                                            cfg.offload.parameters != train::OffloadDevice::kNvme),
                  "checkpoint.async = true stages the model and the optimizer's states in "
                  "memory, which would bring back into RAM what offload.optimizer / "
                  "offload.parameters = nvme moved out of it: set checkpoint.async = false "
                  "(the synchronous save streams them in pieces)");
}

namespace {
// A Markdown table cell: a bare '|' would end the cell ("one of: a | b").
std::string md_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}
}  // namespace

std::string config_markdown() {
  std::ostringstream os;
  os << "# Configuration keys\n\n"
        "Generated by `kiri config --markdown` from the schema in "
        "`src/kiri/cli/config_schema.cpp` (a test keeps this file in sync).\n\n"
        "A config file is JSON, nested (`{\"model\": {\"n_layer\": 4}}`) or flat "
        "(`{\"model.n_layer\": 4}`); `--set key=value` overrides any key after the file. "
        "An unknown key or a bad value is an error naming the key. The file may hold "
        "`//` and `/* */` comments; it must be a regular file of at most 16 MiB, nest at "
        "most 64 levels and give no key twice (in one object, or once flat and once "
        "nested): each is a `config error` naming the file (and the key).\n\n"
        "`kiri train --resume` starts from the config in the checkpoint's `state.json` and "
        "applies the keys a file or `--set` gives on top (steps, schedule, evaluation, "
        "logging, checkpoint cadence, layout, dtype, ...); a given `model.*`, "
        "`data.corpus`, `data.dir`, `data.tokenizer`, `data.val_fraction` or `train.seq_len` "
        "that differs from the checkpoint's is an error naming the key and both values.\n";
  std::string section;
  for (const Field& f : fields()) {
    const std::string s = f.doc.key.substr(0, f.doc.key.find('.'));
    if (s != section) {
      section = s;
      os << "\n## " << section << "\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    os << "| `" << f.doc.key << "` | " << md_cell(f.doc.type) << " | `"
       << md_cell(f.doc.default_value) << "` | " << md_cell(f.doc.doc) << " |\n";
  }
  return os.str();
}

}  // namespace kiri::cli
