#include "kiri/config/config_schema.h"

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "kiri/base/file_read.h"
#include "kiri/base/json_guard.h"
#include "kiri/base/suggest.h"
#include "kiri/base/units.h"
#include "kiri/config/config_field.h"
#include "kiri/config/config_file.h"
#include "kiri/config/offload_config.h"

namespace kiri {

using kiri::RunConfig;
using nlohmann::json;

namespace {

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
  f.set = [range](kiri::RunConfig& c, const json& v) {
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

// log.trace: a path, or true / false for the run folder's trace.json / none.
Field trace_field() {
  Field f = string_field(
      "log.trace", KIRI_FIELD(log.trace),
      "Chrome trace of the run (JSON for Perfetto / chrome://tracing, docs/trace.md): "
      "forward, backward, optimizer, evaluation and every communication call per rank; with "
      "several ranks one file each, `.rank<R>` before the extension (trace.rank3.json). "
      "Events are kept in memory until the end: trace short runs. `true`: "
      "`{run.dir}/trace.json`; a relative path lies in the run folder (`traces/a.json` is "
      "`{run.dir}/traces/a.json`), an absolute one is taken as given; empty or `false` "
      "disables.");
  const auto set_path = f.set;
  f.set = [set_path](kiri::RunConfig& c, const json& v) {
    const bool is_true = v.is_boolean() ? v.get<bool>() : v.is_string() && v == "true";
    const bool is_false = v.is_boolean() ? !v.get<bool>() : v.is_string() && v == "false";
    if (is_true)
      c.log.trace = "{run.dir}/trace.json";
    else if (is_false)
      c.log.trace.clear();
    else
      set_path(c, v);
  };
  return f;
}

std::vector<Field> make_fields() {
  constexpr int64_t kBig = int64_t{1} << 40;
  std::vector<Field> f;
  // run
  f.push_back(string_field("run.name", KIRI_FIELD(run.name),
                           "The run's name: the folder of run.dir's default. Unset, a run "
                           "given a config file is named after it, as torchtitan and the HF "
                           "Trainer name their output folders (`configs/llama-tiny.json`: "
                           "`llama-tiny`, so runs/llama-tiny), and one without is `kiri`."));
  f.push_back(string_field(
      "run.dir", KIRI_FIELD(run.dir),
      "The run folder: `config.json` (the resolved config, written at the start), the "
      "metrics, the loss plot and the checkpoints. `{run.name}` is replaced by run.name, and "
      "`{run.dir}` in checkpoint.dir, log.metrics, log.plot and log.trace by this folder; a "
      "path given without it is taken as given (log.trace's relative path: inside this folder). A "
      "fresh run refuses a folder that holds "
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
  f.push_back(int_field("train.steps", KIRI_FIELD(train.steps), 0, kBig,
                        "Optimizer steps (`--max-steps`); or train.epochs."));
  f.push_back(float_field("train.epochs", KIRI_FIELD(train.epochs), 0, 1e6,
                          "Passes over the training split instead of train.steps (HF's "
                          "num_train_epochs; `--epochs`): the run takes ceil(epochs x the "
                          "split's samples of train.seq_len tokens / the global batch) steps, "
                          "counted when the data is opened. 0: train.steps. Give one of the two."));
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
      std::vector<std::pair<std::string, kiri::LrScaling>>{{"none", kiri::LrScaling::kNone},
                                                           {"linear", kiri::LrScaling::kLinear},
                                                           {"sqrt", kiri::LrScaling::kSqrt}},
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
      std::vector<std::pair<std::string, kiri::LrSchedule>>{
          {"cosine", kiri::LrSchedule::kCosine},
          {"linear", kiri::LrSchedule::kLinear},
          {"constant", kiri::LrSchedule::kConstant},
          {"ds_warmup", kiri::LrSchedule::kDsWarmup},
          {"ds_warmup_decay", kiri::LrSchedule::kDsWarmupDecay},
          {"ds_warmup_cosine", kiri::LrSchedule::kDsWarmupCosine}},
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
                 std::vector<std::pair<std::string, kiri::WarmupType>>{
                     {"linear", kiri::WarmupType::kLinear}, {"log", kiri::WarmupType::kLog}},
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
      std::vector<std::pair<std::string, kiri::Precision>>{{"fp32", kiri::Precision::kFp32},
                                                           {"bf16", kiri::Precision::kBf16},
                                                           {"fp16", kiri::Precision::kFp16}},
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
  add_parallel_fields(f);  // config_layout_fields.cpp
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
      // As ckpt::hf::parse_max_shard_size reads it (not called: the fuzz build's readers link
      // no checkpoint code).
      [](const std::string& s) {
        KIRI_CHECK_KIND(kConfig, parse_bytes(s) > 0,
                        "checkpoint.max_shard_size must be a positive size (e.g. 5GB, 2GiB), got '",
                        quote_bounded(s, 80), "'");
      }));
  add_offload_fields(f);  // config_layout_fields.cpp
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
  f.push_back(bool_field("log.csv", KIRI_FIELD(log.csv),
                         "Also write `{run.dir}/metrics.csv`: a header, then one row per step of "
                         "the scalars (loss, val_loss, lr, grad_norm, tokens_per_s, step_s, mfu, "
                         "mem/<category> bytes, comm/bytes_sent and comm/bytes_received; "
                         "docs/metrics.md). A resumed run keeps the rows up to its step."));
  f.push_back(bool_field("log.tensorboard", KIRI_FIELD(log.tensorboard),
                         "Also write the same scalars as TensorBoard events (tags as log.csv's "
                         "columns) to `{run.dir}/events.out.tfevents.<secs>.<host>.<pid>.<n>`, "
                         "a new file per start; `tensorboard --logdir runs` shows every run."));
  f.push_back(trace_field());
  // Fill the defaults from a default-constructed config.
  RunConfig defaults = kiri::default_run_config();
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

// Hugging Face TrainingArguments' names (and the flags of its scripts) that a config or --set
// may carry over: each names kiri's key, which an edit distance would not find.
std::optional<std::string> hf_name_key(const std::string& key) {
  static const std::map<std::string, std::string> names = {
      {"learning_rate", "train.lr"},
      {"per_device_train_batch_size", "train.micro_batch"},
      {"gradient_accumulation_steps", "train.grad_accum"},
      {"num_train_epochs", "train.epochs"},
      {"max_steps", "train.steps"},
      {"warmup_steps", "train.warmup"},
      {"weight_decay", "train.weight_decay"},
      {"max_grad_norm", "train.grad_clip"},
      {"adam_beta1", "train.beta1"},
      {"adam_beta2", "train.beta2"},
      {"adam_epsilon", "train.eps"},
      {"lr_scheduler_type", "train.lr_schedule"},
      {"seed", "train.seed"},
      {"output_dir", "run.dir"},
      {"logging_steps", "log.every"},
      {"save_steps", "checkpoint.every"},
      {"save_total_limit", "checkpoint.keep_last"},
      {"eval_steps", "train.eval_every"},
      {"bf16", "train.dtype (bf16)"},
      {"fp16", "train.dtype (fp16)"}};
  // "train.learning_rate" too: the name after the last dot.
  const auto it = names.find(key.substr(key.rfind('.') + 1));
  if (it == names.end()) return std::nullopt;
  return it->second;
}

const Field& find_field(const std::string& key) {
  for (const Field& f : fields())
    if (f.doc.key == key) return f;
  if (auto kiri_key = hf_name_key(key))
    KIRI_RAISE(kConfig, "unknown key '", quote_bounded(key, 120),
               "': that is a Hugging Face TrainingArguments name; kiri's key is ", *kiri_key,
               " (docs/config.md)");
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
  RunConfig cfg = kiri::default_run_config();
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
  RunConfig cfg = kiri::default_run_config();
  if (!file.empty()) {
    cfg = parse_config_text(read_config_text(file), file);
    // Each config file its own run folder unless it names one: examples run one after another.
    bool named = false;
    for (const auto& [key, value] : config_entries(file, {})) named |= key == "run.name";
    const std::string stem = std::filesystem::path(file).stem().string();
    if (!named && !stem.empty()) cfg.run.name = stem;
  }
  for (const std::string& s : sets) apply_set(cfg, s);
  // Two ways to say how long: which one counts would be a guess.
  if (cfg.train.epochs > 0) {
    bool steps = false;
    for (const auto& [key, value] : config_entries(file, sets)) steps |= key == "train.steps";
    KIRI_CHECK_KIND(kConfig, !steps, "train.steps and train.epochs = ", cfg.train.epochs,
                    " are both given (--max-steps, --epochs): give one of them");
  }
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
  kiri::resolve_run_paths(cfg);  // names a bad run.name / run.dir
  kiri::GPTConfig m = cfg.model;
  if (m.vocab_size == 0) m.vocab_size = 2;  // resolved from the tokenizer later
  m.validate();
  KIRI_CHECK_KIND(kConfig, cfg.train.seq_len <= cfg.model.block_size,
                  "train.seq_len = ", cfg.train.seq_len,
                  " exceeds model.block_size = ", cfg.model.block_size);
  KIRI_CHECK_KIND(kConfig, cfg.train.min_lr <= cfg.train.optimizer.lr,
                  "train.min_lr = ", cfg.train.min_lr,
                  " exceeds train.lr = ", cfg.train.optimizer.lr);
  kiri::validate_offload(cfg);  // the I/O keys, all problems in one message
  // Every layout rule that needs no world, refused before any work (dp 0: inferred later),
  // the recompute modules first (known names, selective only).
  kiri::check_layout(cfg);
  KIRI_CHECK_KIND(kConfig,
                  !cfg.checkpoint.async || (cfg.offload.optimizer != kiri::OffloadTier::kNvme &&
                                            cfg.offload.parameters != kiri::OffloadTier::kNvme),
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
        "`src/kiri/config/config_schema.cpp` (a test keeps this file in sync).\n\n"
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

}  // namespace kiri
