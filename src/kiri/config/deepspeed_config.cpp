#include "kiri/config/deepspeed_config.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "kiri/base/file_read.h"
#include "kiri/config/config_file.h"
#include "kiri/config/deepspeed_mapper.h"

namespace kiri {

namespace deepspeed_detail {

bool is_auto(const json& v) {
  return v.is_string() && v.get<std::string>() == "auto";
}

std::string shown(const json& v) {
  return quote_bounded(v.dump(), 80);
}

namespace {

// Keys reach the messages raw (values go through JSON's dump, escaped): a key's control
// characters are written as JSON writes them, \u0000, so that a NUL does not cut the
// message when it is printed and a newline does not break the list of problems.
std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f) {
      out += c;
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", b);
    out += buf;
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The zero_optimization keys that tune how DeepSpeed's engine moves data, each with why it
// changes nothing in kiri's (which gives the same weights either way).
const std::map<std::string, std::string>& zero_no_effect() {
  static const std::map<std::string, std::string> m = {
      {"allgather_partitions",
       "kiri all-gathers the updated shards after the step (stages 1-2) by construction"},
      {"allgather_bucket_size",
       "kiri all-gathers per sharding unit (parallel.wrap_blocks), not in element buckets"},
      {"overlap_comm",
       "kiri overlaps by construction: DDP's bucket all-reduces and ZeRO's per-unit "
       "reductions start while backward runs"},
      {"contiguous_gradients", "kiri's gradients live in one flat buffer by construction"},
      {"reduce_scatter", "stages 2 and 3 reduce-scatter the gradients by construction"},
      {"stage3_param_persistence_threshold",
       "kiri's stage 3 shards every parameter, small ones too"},
      {"stage3_max_live_parameters",
       "kiri's stage 3 holds the computing unit and at most one prefetched unit gathered"},
      {"stage3_max_reuse_distance",
       "kiri's stage 3 frees a unit's gathered parameters after use and gathers them again "
       "in backward"},
      {"stage3_gather_16bit_weights_on_model_save",
       "kiri's checkpoints always hold the whole model, gathered, in model.safetensors"},
      {"stage3_gather_fp16_weights_on_model_save",
       "kiri's checkpoints always hold the whole model, gathered, in model.safetensors"},
      {"sub_group_size",
       "kiri updates each rank's whole shard in one optimizer step (offloaded, it streams "
       "it through buffers of offload.buffer_mb)"},
      {"round_robin_gradients",
       "an ordering of the gradients' copies to the host for CPU offload; on the CPU backend "
       "the gradients are already there"},
      {"elastic_checkpoint", "kiri's checkpoints load on any layout (docs/checkpoints.md)"},
      {"ignore_unused_parameters", "every parameter of kiri's GPT gets a gradient"},
  };
  return m;
}

}  // namespace

DeepSpeedConfig Mapper::run() {
  precision();
  if (ds_.contains("optimizer")) optimizer(ds_["optimizer"]);
  if (ds_.contains("scheduler")) scheduler(ds_["scheduler"]);
  if (ds_.contains("zero_optimization")) zero(ds_["zero_optimization"]);
  if (ds_.contains("activation_checkpointing"))
    activation_checkpointing(ds_["activation_checkpointing"]);
  // DeepSpeed reads aio at the top level; the Hugging Face guide's NVMe example nests it in
  // zero_optimization (zero_key maps that one).
  const bool nested = ds_.contains("zero_optimization") && ds_["zero_optimization"].is_object() &&
                      ds_["zero_optimization"].contains("aio");
  if (ds_.contains("aio") && nested)
    problems_.push_back(
        "aio is given both at the top level and in zero_optimization: give it once");
  else if (ds_.contains("aio"))
    aio("aio", ds_["aio"]);
  top_level();
  batch();
  for (std::string& note : out_.notes) note = printable(note);
  if (!problems_.empty()) {
    std::string list;
    for (const std::string& p : problems_) list += "\n  - " + printable(p);
    KIRI_RAISE(kConfig, "DeepSpeed config '", where_, "': ", problems_.size(),
               " key(s) kiri cannot run as given (docs/deepspeed.md):", list);
  }
  out_.config = cfg_;
  return out_;
}

// bf16.enabled / fp16.enabled -> train.dtype; "auto" (or no "enabled") keeps kiri's.
void Mapper::precision() {
  KIRI_CHECK_KIND(kConfig, !(ds_.contains("bf16") && ds_.contains("bfloat16")),
                  "DeepSpeed config '", where_,
                  "' gives both bf16 and bfloat16 (the same section): keep one");
  const std::string bf = ds_.contains("bfloat16") ? "bfloat16" : "bf16";
  auto enabled = [&](const std::string& name) -> std::optional<bool> {
    if (!ds_.contains(name) || !is_object(name, ds_[name])) return std::nullopt;
    const json& s = ds_[name];
    if (!s.contains("enabled") || is_auto(s["enabled"])) return std::nullopt;
    if (!s["enabled"].is_boolean()) {
      problems_.push_back(
          str(name, ".enabled must be true, false or \"auto\", got ", shown(s["enabled"])));
      return std::nullopt;
    }
    return s["enabled"].get<bool>();
  };
  const std::optional<bool> bf16 = enabled(bf), fp16 = enabled("fp16");
  const kiri::Precision now = cfg_.train.dtype;
  if (bf16.value_or(false) && fp16.value_or(false))
    problems_.push_back(str(bf,
                            ".enabled and fp16.enabled are both true (DeepSpeed refuses "
                            "that too): enable one"));
  else if (bf16.value_or(false))
    set(bf + ".enabled", "train.dtype", "bf16");
  else if (fp16.value_or(false))
    set("fp16.enabled", "train.dtype", "fp16");
  else if (bf16 && now == kiri::Precision::kBf16)
    set(bf + ".enabled", "train.dtype", "fp32");
  else if (fp16 && now == kiri::Precision::kFp16)
    set("fp16.enabled", "train.dtype", "fp32");
  if (ds_.contains(bf) && ds_[bf].is_object())
    for (auto it = ds_[bf].begin(); it != ds_[bf].end(); ++it)
      if (it.key() != "enabled")
        unsupported(bf + "." + it.key(), *it, "kiri's bf16 takes only \"enabled\"");
  if (ds_.contains("fp16") && ds_["fp16"].is_object()) fp16_keys(ds_["fp16"]);
}

// fp16's loss-scale keys -> kiri's (the same dynamic scaler: halve on overflow, double after
// loss_scale_window clean steps, never below min_loss_scale).
void Mapper::fp16_keys(const json& fp16) {
  const bool on = cfg_.train.dtype == kiri::Precision::kFp16;
  const std::map<std::string, std::string> keys = {
      {"loss_scale", "train.loss_scale"},
      {"initial_scale_power", "train.initial_scale_power"},
      {"loss_scale_window", "train.loss_scale_window"},
      {"min_loss_scale", "train.min_loss_scale"}};
  for (auto it = fp16.begin(); it != fp16.end(); ++it) {
    const std::string path = "fp16." + it.key();
    const json& v = *it;
    if (it.key() == "enabled" || is_auto(v)) continue;
    if (auto k = keys.find(it.key()); k != keys.end()) {
      set(path, k->second, v);
    } else if (it.key() == "hysteresis") {
      if (!on)
        no_effect(path, "only fp16 scales the loss, and train.dtype is not fp16");
      else
        only(path, v, 1, "kiri backs off at every overflow",
             "kiri's loss scaler backs off at the first overflow (hysteresis 1); this waits "
             "for more: set \"hysteresis\": 1, or train in bf16");
    } else if (it.key() == "consecutive_hysteresis") {
      no_effect(path, "with hysteresis 1, kiri's, every overflow backs off");
    } else if (it.key() == "auto_cast") {
      only(path, v, false, "kiri casts only the GEMMs' inputs to fp16",
           "kiri does not cast the model's inputs to fp16");
    } else if (it.key() == "fp16_master_weights_and_grads") {
      only(path, v, false, "kiri keeps fp32 master weights",
           "kiri keeps fp32 master weights and reduces 16-bit gradients");
    } else {
      unsupported(path, v, "not a DeepSpeed fp16 key kiri maps");
    }
  }
}

// optimizer: AdamW, or DeepSpeed's Adam in its default AdamW mode.
void Mapper::optimizer(const json& o) {
  if (!is_object("optimizer", o)) return;
  for (auto it = o.begin(); it != o.end(); ++it)
    if (it.key() != "type" && it.key() != "params")
      unsupported("optimizer." + it.key(), *it, "an optimizer has a type and params");
  const std::string type = o.contains("type") && o["type"].is_string()
                               ? lower(o["type"].get<std::string>())
                               : std::string();
  if (type != "adamw" && type != "adam")
    unsupported("optimizer.type", o.value("type", json()),
                "kiri trains with AdamW (DeepSpeed's AdamW, or Adam with adam_w_mode true)");
  const json params = o.value("params", json::object());
  if (!is_object("optimizer.params", params)) return;
  bool adam_w_mode = true;
  const std::map<std::string, std::string> keys = {
      {"lr", "train.lr"}, {"eps", "train.eps"}, {"weight_decay", "train.weight_decay"}};
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string path = "optimizer.params." + it.key();
    const json& v = *it;
    if (is_auto(v)) continue;
    if (auto k = keys.find(it.key()); k != keys.end()) {
      set(path, k->second, v);
    } else if (it.key() == "betas") {
      if (!v.is_array() || v.size() != 2) {
        problems_.push_back(str(path, " must be [beta1, beta2], got ", shown(v)));
        continue;
      }
      set(path + "[0]", "train.beta1", v[0]);
      set(path + "[1]", "train.beta2", v[1]);
    } else if (it.key() == "adam_w_mode") {
      adam_w_mode = !(v.is_boolean() && !v.get<bool>());
    } else if (it.key() == "torch_adam") {
      no_effect(path, "kiri runs its own AdamW");
    } else if (it.key() == "bias_correction") {
      only(path, v, true, "kiri's AdamW corrects the bias",
           "kiri's AdamW always corrects the bias");
    } else if (it.key() == "amsgrad") {
      only(path, v, false, "plain AdamW", "kiri's AdamW has no AMSGrad");
    } else {
      unsupported(path, v, "not an AdamW parameter kiri maps (lr, betas, eps, weight_decay)");
    }
  }
  if (!adam_w_mode && cfg_.train.optimizer.weight_decay != 0)
    unsupported("optimizer.params.adam_w_mode", false,
                str("Adam with L2 weight decay: kiri's AdamW decays decoupled (weight_decay ",
                    cfg_.train.optimizer.weight_decay, "); set adam_w_mode true"));
}

// scheduler: DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR -> train.lr_schedule ds_*.
void Mapper::scheduler(const json& s) {
  if (!is_object("scheduler", s)) return;
  for (auto it = s.begin(); it != s.end(); ++it)
    if (it.key() != "type" && it.key() != "params")
      unsupported("scheduler." + it.key(), *it, "a scheduler has a type and params");
  const std::map<std::string, std::string> types = {{"WarmupLR", "ds_warmup"},
                                                    {"WarmupDecayLR", "ds_warmup_decay"},
                                                    {"WarmupCosineLR", "ds_warmup_cosine"}};
  const std::string type =
      s.contains("type") && s["type"].is_string() ? s["type"].get<std::string>() : "";
  const auto t = types.find(type);
  if (t == types.end()) {
    unsupported("scheduler.type", s.value("type", json()),
                "kiri runs WarmupLR, WarmupDecayLR and WarmupCosineLR (and its own cosine, "
                "linear and constant: train.lr_schedule)");
    return;
  }
  set("scheduler.type", "train.lr_schedule", t->second);
  const json params = s.value("params", json::object());
  if (is_object("scheduler.params", params)) scheduler_params(type, params);
}

// A left-out parameter takes DeepSpeed's default (lr_schedules.py), "auto" kiri's value.
void Mapper::scheduler_params(const std::string& type, const json& params) {
  const bool cosine = type == "WarmupCosineLR", decay = type == "WarmupDecayLR";
  std::set<std::string> known = {"warmup_num_steps", "warmup_type", "last_batch_iteration"};
  for (const char* k :
       cosine ? std::vector<const char*>{"total_num_steps", "warmup_min_ratio", "cos_min_ratio"}
              : std::vector<const char*>{"warmup_min_lr", "warmup_max_lr"})
    known.insert(k);
  if (decay) known.insert("total_num_steps");
  for (auto it = params.begin(); it != params.end(); ++it)
    if (!known.count(it.key()))
      unsupported("scheduler.params." + it.key(), *it, "not a parameter of DeepSpeed's " + type);
  auto param = [&](const char* name, const json& fallback) {
    return params.contains(name) ? params[name] : fallback;
  };
  const std::string p = "scheduler.params.";
  // The peak first: WarmupCosineLR's ratios multiply it. WarmupLR's default is the
  // optimizer's lr (train.lr already), WarmupDecayLR's 0.001.
  if (const json v = param("warmup_max_lr", decay ? json(0.001) : json("auto")); !is_auto(v))
    set(p + "warmup_max_lr", "train.lr", v);
  if (const json v = param("warmup_num_steps", 1000); !is_auto(v)) {
    if (v.is_number() && v.get<double>() >= 1)
      set(p + "warmup_num_steps", "train.warmup", v);
    else
      problems_.push_back(str(p,
                              "warmup_num_steps must be a positive integer (DeepSpeed's "
                              "rule), got ",
                              shown(v)));
  }
  if (const json v = param("warmup_type", "log"); !is_auto(v))
    set(p + "warmup_type", "train.warmup_type", v);
  if ((cosine || decay) && params.contains("total_num_steps") &&
      !is_auto(params["total_num_steps"]))
    set(p + "total_num_steps", "train.decay_steps", params["total_num_steps"]);
  if (params.contains("last_batch_iteration"))
    only(p + "last_batch_iteration", params["last_batch_iteration"], -1,
         "kiri --resume continues the schedule at the checkpoint's step",
         "kiri starts the schedule at step 0; --resume continues it from a checkpoint");
  const double lr = cfg_.train.optimizer.lr;
  if (cosine) {
    if (const json v = param("warmup_min_ratio", 0.0); !is_auto(v))
      if (auto r = number(p + "warmup_min_ratio", v))
        set(p + "warmup_min_ratio", "train.warmup_lr", *r * lr);
    if (const json v = param("cos_min_ratio", 1e-4); !is_auto(v))
      if (auto r = number(p + "cos_min_ratio", v))
        set(p + "cos_min_ratio", "train.min_lr", *r * lr);
    return;
  }
  // "auto": kiri's train.warmup_lr and train.min_lr, each its own (never a conflict).
  const json v = param("warmup_min_lr", 0.0);
  if (is_auto(v)) return;
  set(p + "warmup_min_lr", "train.warmup_lr", v);
  // WarmupDecayLR decays back to warmup_min_lr; WarmupLR never reads min_lr (soft: the
  // value is kept only for train.min_lr <= train.lr).
  set(p + "warmup_min_lr", "train.min_lr", cfg_.train.warmup_lr, /*soft=*/!decay);
}

void Mapper::zero(const json& z) {
  if (z.is_boolean()) {  // DeepSpeed's old form: true = stage 1
    set("zero_optimization", "parallel.zero_stage", z.get<bool>() ? 1 : 0);
    return;
  }
  if (!is_object("zero_optimization", z)) return;
  for (auto it = z.begin(); it != z.end(); ++it)
    if (!is_auto(*it)) zero_key("zero_optimization." + it.key(), it.key(), *it);
}

void Mapper::zero_key(const std::string& path, const std::string& k, const json& v) {
  if (k == "stage") {
    set(path, "parallel.zero_stage", v);
  } else if (k == "reduce_bucket_size") {  // elements; kiri's buckets are MiB of gradients
    const double bytes = cfg_.train.dtype == kiri::Precision::kFp32 ? 4 : 2;
    if (auto n = number(path, v)) set(path, "parallel.bucket_mb", *n * bytes / (1 << 20));
  } else if (k == "stage3_prefetch_bucket_size") {
    if (auto n = number(path, v)) set(path, "parallel.prefetch", *n > 0);
  } else if (k == "offload_optimizer" || k == "offload_param") {
    offload(path, v, k == "offload_param");
  } else if (k == "cpu_offload") {  // DeepSpeed's old key: offload_optimizer.device cpu
    cpu_offload(path, v, "offload.optimizer");
  } else if (k == "cpu_offload_params" || k == "cpu_offload_param") {  // old: offload_param cpu
    cpu_offload(path, v, "offload.parameters");
  } else if (k == "cpu_offload_use_pin_memory") {
    no_effect(path, "on the CPU backend no copy between device and host is pinned for");
  } else if (k == "aio") {  // where the Hugging Face guide's NVMe example puts it
    aio(path, v);
  } else if (k == "mics_shard_size") {
    const auto n = number(path, v);
    if (n && *n > 0) {
      set(path, "parallel.sharding_strategy", "HYBRID_SHARD");
      set(path, "parallel.shard_group_size", *n);
    } else if (n) {
      no_effect(path, "MiCS off");
    }
  } else if (k == "zero_hpz_partition_size") {
    only(path, v, 1, "no secondary partition", "kiri has no hpZ secondary partition");
  } else if (k == "zero_quantized_weights" || k == "zero_quantized_gradients" ||
             k == "zero_quantized_nontrainable_weights") {
    only(path, v, false, "no quantized communication", "kiri communicates unquantized values");
  } else if (k == "load_from_fp32_weights") {
    only(path, v, true, "kiri resumes from the fp32 master weights",
         "kiri resumes from the fp32 master weights");
  } else if (auto n = zero_no_effect().find(k); n != zero_no_effect().end()) {
    if (v.is_boolean() || v.is_number())
      no_effect(path, n->second);
    else
      problems_.push_back(str(path, " must be a boolean or a number, got ", shown(v)));
  } else {
    unsupported(path, v, "not a zero_optimization key kiri maps");
  }
}

// DeepSpeed's section configures the recomputation that the model code switches on
// (Megatron's --checkpoint-activations, HF's gradient_checkpointing): kiri reads the
// section as that switch, every block (parallel.activation_checkpointing full).
void Mapper::activation_checkpointing(const json& a) {
  if (!is_object("activation_checkpointing", a)) return;
  if (cfg_.parallel.activation_checkpointing == kiri::ActivationCheckpointing::kNone)
    set("activation_checkpointing", "parallel.activation_checkpointing", "full");
  const std::map<std::string, std::string> no_effect_keys = {
      {"contiguous_memory_optimization", "kiri's allocator holds each checkpoint in place"},
      {"number_checkpoints", "it only sizes the contiguous buffers"},
      {"synchronize_checkpoint_boundary", "kiri computes on the CPU, in order"},
      {"profile", "log.trace times forward, backward and recomputation"}};
  for (auto it = a.begin(); it != a.end(); ++it) {
    const std::string path = "activation_checkpointing." + it.key();
    if (it.key() == "partition_activations")
      only(path, *it, false, "every tensor-parallel rank keeps the whole block input",
           "kiri keeps each checkpointed block input whole on every tensor-parallel rank");
    else if (it.key() == "cpu_checkpointing")
      only(path, *it, false, "checkpoints stay in memory",
           "kiri does not move activation checkpoints off RAM (offload covers the optimizer "
           "states and the parameters: docs/offload.md)");
    else if (auto n = no_effect_keys.find(it.key()); n != no_effect_keys.end())
      no_effect(path, n->second);
    else
      unsupported(path, *it, "not an activation_checkpointing key kiri maps");
  }
}

// DeepSpeed's monitors: tensorboard / csv_monitor {enabled, output_path, job_name} as kiri's
// log.tensorboard / log.csv, whose files go into the run folder.
void Mapper::monitor(const std::string& path, const json& m, const char* key) {
  if (!is_object(path, m)) return;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string p = path + "." + it.key();
    if (it.key() == "enabled")
      set(p, key, *it);
    else if (it.key() == "output_path" || it.key() == "job_name")
      no_effect(p, "kiri writes the files into the run folder, run.dir");
    else
      unsupported(p, *it, "not a DeepSpeed monitor key kiri maps");
  }
}

void Mapper::top_level() {
  const std::set<std::string> sections = {"train_batch_size",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "bf16",
                                          "bfloat16",
                                          "fp16",
                                          "optimizer",
                                          "scheduler",
                                          "zero_optimization",
                                          "activation_checkpointing",
                                          "aio"};
  const std::string dtype = get_key(cfg_, "train.dtype").get<std::string>();
  for (auto it = ds_.begin(); it != ds_.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (sections.count(k) || is_auto(v)) continue;
    if (k == "gradient_clipping")
      set(k, "train.grad_clip", v);
    else if (k == "steps_per_print")  // 2000 as log.every would keep kiri silent that long
      typed_no_effect(k, v, v.is_number() && v.get<double>() >= 1, "a positive integer",
                      "DeepSpeed's own console interval; kiri's progress line keeps log.every");
    else if (k == "wall_clock_breakdown")
      no_effect(k, "kiri's metrics.jsonl times every step; log.trace breaks it down");
    else if (k == "zero_allow_untested_optimizer" || k == "zero_force_ds_cpu_optimizer")
      no_effect(k, "kiri's ZeRO runs its one optimizer, AdamW");
    else if (k == "prescale_gradients")
      no_effect(k,
                "kiri's loss is already divided by the global batch's tokens, so each "
                "rank's gradient is divided by dp before the reduction");
    else if (k == "gradient_predivide_factor")
      only(k, v, 1.0, "the default", "kiri divides by the whole dp before the reduction");
    else if (k == "communication_data_type")
      only(k, v, dtype, "kiri reduces gradients in train.dtype",
           "kiri reduces gradients in train.dtype, " + dtype);
    else if (k == "sparse_gradients" || k == "memory_breakdown")
      only(k, v, false, "off", "not in kiri");
    else if (k == "tensorboard" || k == "csv_monitor")
      monitor(k, v, k == "tensorboard" ? "log.tensorboard" : "log.csv");
    else if (v.is_object() && v.contains("enabled") && v["enabled"] == false)
      no_effect(k, "disabled");
    else
      unsupported(k, v, "not a DeepSpeed key kiri maps");
  }
}

// train_batch_size = micro x accumulation x dp (x the pipeline's m): checked when all three
// are given, the missing one inferred otherwise (as DeepSpeed does).
void Mapper::batch() {
  const char *kM = "train_micro_batch_size_per_gpu", *kA = "gradient_accumulation_steps",
             *kT = "train_batch_size";
  if (ds_.contains(kM) && !is_auto(ds_[kM])) set(kM, "train.micro_batch", ds_[kM]);
  if (ds_.contains(kA) && !is_auto(ds_[kA])) set(kA, "train.grad_accum", ds_[kA]);
  if (!ds_.contains(kT) || is_auto(ds_[kT])) return;
  const json& t = ds_[kT];
  if (!t.is_number() || t.get<double>() < 1 || t.get<double>() != std::floor(t.get<double>()) ||
      t.get<double>() > 1e15) {
    problems_.push_back(str(kT, " must be a positive integer, got ", shown(t)));
    return;
  }
  const int64_t total = static_cast<int64_t>(t.get<double>());
  // Only the total: DeepSpeed's accumulation 1 is kiri's default (or the config's).
  if (!ds_.contains(kM))
    infer_batch(kM, "train.micro_batch", total, cfg_.train.grad_accum, kA);
  else if (!ds_.contains(kA))
    infer_batch(kA, "train.grad_accum", total, cfg_.train.micro_batch, kM);
  else
    infer_batch(nullptr, nullptr, total, 0, nullptr);
}

void Mapper::infer_batch(const char* path, const char* key, int64_t total, int64_t other,
                         const char* other_name) {
  const kiri::Layout& p = cfg_.parallel;
  const int64_t model = int64_t{p.tp} * p.pp;
  int64_t dp = p.dp;
  std::string dp_from = str("parallel.dp ", dp);
  if (dp == 0) {
    if (model < 1 || world_ % model != 0) return;  // resolve_layout names the layout
    dp = world_ / model;
    dp_from = str("dp = world ", world_, " / (tp ", p.tp, " x pp ", p.pp, ")");
  }
  const int64_t m = p.microbatches;
  const std::string pipe = m > 1 ? str(" x parallel.microbatches ", m) : "";
  if (path) {  // infer the missing one
    const int64_t denom = other * dp * m;
    if (total % denom != 0) {
      problems_.push_back(str("train_batch_size = ", total, " is not a multiple of ", other_name,
                              " ", other, " x dp ", dp, pipe, " = ", denom, " (", dp_from,
                              "): ", path, " would be their quotient"));
      return;
    }
    set("train_batch_size", key, json(total / denom));
  }
  const int64_t product = cfg_.train.micro_batch * cfg_.train.grad_accum * dp * m;
  if (product != total)
    problems_.push_back(str("train_batch_size = ", total, " but train_micro_batch_size_per_gpu ",
                            cfg_.train.micro_batch, " x gradient_accumulation_steps ",
                            cfg_.train.grad_accum, " x dp ", dp, pipe, " = ", product, " (",
                            dp_from, ")"));
}

}  // namespace deepspeed_detail

using deepspeed_detail::json;
using deepspeed_detail::RunConfig;

DeepSpeedConfig apply_deepspeed(const json& ds, const std::string& where, const RunConfig& cfg,
                                const std::vector<std::pair<std::string, json>>& given, int world) {
  KIRI_CHECK_KIND(kConfig, ds.is_object(), "DeepSpeed config '", where,
                  "' must be a JSON object, got ", ds.type_name());
  return deepspeed_detail::Mapper(ds, where, cfg, given, world).run();
}

namespace {

bool key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// `message` with the file's JSON path before each kiri key that `path_of` holds: every run of
// key characters (a trailing '.' is the sentence's) is looked up whole, so train.lr is not
// found inside train.lr_schedule.
std::string with_paths(const std::string& message,
                       const std::map<std::string, std::string>& path_of, bool& named) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    if (!key_char(message[i])) {
      out += message[i++];
      continue;
    }
    size_t end = i;
    while (end < message.size() && key_char(message[end])) ++end;
    size_t word_end = end;
    while (word_end > i && message[word_end - 1] == '.') --word_end;
    const std::string word = message.substr(i, word_end - i);
    if (auto it = path_of.find(word); it != path_of.end()) {
      out += it->second + " (" + word + ")";
      named = true;
    } else {
      out += word;
    }
    out += message.substr(word_end, end - word_end);
    i = end;
  }
  return out;
}

}  // namespace

void validate_deepspeed(const RunConfig& cfg, const std::map<std::string, std::string>& path_of,
                        const std::string& where) {
  try {
    validate(cfg);
  } catch (const Error& e) {
    bool named = false;
    const std::string message = with_paths(e.message(), path_of, named);
    if (!named || e.kind() != ErrorKind::kConfig) throw;
    KIRI_RAISE(kConfig, "DeepSpeed config '", where, "': ", message);
  }
}

DeepSpeedConfig load_deepspeed(const std::string& file, const RunConfig& cfg,
                               const std::vector<std::pair<std::string, json>>& given, int world) {
  return apply_deepspeed(read_config_file(file, "DeepSpeed config"), file, cfg, given, world);
}

}  // namespace kiri
