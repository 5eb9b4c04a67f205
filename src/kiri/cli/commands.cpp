#include "kiri/cli/commands.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/base/units.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/cli/args.h"
#include "kiri/cli/config_schema.h"
#include "kiri/cli/deepspeed_config.h"
#include "kiri/cli/init_from.h"
#include "kiri/cli/verbs.h"
#include "kiri/cli/world.h"
#include "kiri/data/corpus.h"
#include "kiri/parallel/mesh.h"
#include "kiri/plan/calibration.h"
#include "kiri/plan/planner.h"
#include "kiri/train/checkpoint_state.h"
#include "kiri/train/generate.h"
#include "kiri/train/hf_model.h"
#include "kiri/train/run_dir.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

using nlohmann::json;

namespace {

std::string config_file(const Args& a, size_t max_positional) {
  KIRI_CHECK_KIND(kConfig, a.positional().size() <= max_positional, "too many arguments: at most ",
                  max_positional, " CONFIG file expected");
  return a.positional().empty() ? "" : a.positional()[0];
}

// --deepspeed FILE: the DeepSpeed config's keys over `cfg` (the kiri file's and --set's,
// which a key of the file must agree with); the keys it accepts with no effect are logged
// (rank 0, stderr). Returns the kiri keys it set: a resumed run applies them again.
std::vector<std::pair<std::string, json>> apply_deepspeed_option(
    const Args& a, const std::string& file, const std::vector<std::string>& sets,
    train::RunConfig& cfg) {
  const std::optional<std::string> path = a.get("deepspeed");
  if (!path) return {};
  DeepSpeedConfig ds = load_deepspeed(*path, cfg, config_entries(file, sets), job_size());
  if (job_rank() <= 0)
    for (const std::string& note : ds.notes) log::info("--deepspeed ", *path, ": ", note);
  cfg = ds.config;
  return ds.entries;
}

// The config of kiri config: file, --set overrides, --mem-limit, --deepspeed.
train::RunConfig config_of(const Args& a, size_t max_positional) {
  const std::string file = config_file(a, max_positional);
  std::vector<std::string> sets = a.all("set");
  if (auto m = a.get("mem-limit")) sets.push_back("train.mem_limit=" + *m);
  train::RunConfig cfg = load_config(file, sets);
  apply_deepspeed_option(a, file, sets, cfg);
  validate(cfg);
  return cfg;
}

// The run config stored in a checkpoint's state.json (the config the run was given:
// parallel.dp, the learning rates and the {run.dir} paths before their resolution).
train::RunConfig checkpoint_config(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  const train::CheckpointState state = train::read_checkpoint_state(dir);
  KIRI_CHECK_KIND(kCheckpoint, state.config.is_object(), dir, "/state.json has no config");
  return config_from_json(state.config);
}

// The keys that a resumed run keeps from its checkpoint: they fix the parameters'
// shapes and what the data position counts (samples of seq_len tokens of one corpus).
bool is_saved_shape_key(const std::string& key) {
  return key.rfind("model.", 0) == 0 || key == "data.tokenizer" || key == "data.corpus" ||
         key == "data.dir" || key == "data.val_fraction" || key == "train.seq_len";
}

// --resume: the checkpoint's config with the given keys on top. A given key that
// contradicts a saved shape is a kConfig error naming it and both values.
train::RunConfig resumed_config(const std::string& dir,
                                const std::vector<std::pair<std::string, json>>& given) {
  train::RunConfig cfg = checkpoint_config(dir);
  for (const auto& [key, value] : given) {
    train::RunConfig probe = cfg;
    apply_key(probe, key, value);
    const json saved = get_key(cfg, key), now = get_key(probe, key);
    if (!is_saved_shape_key(key) || now == saved) {
      cfg = probe;
      continue;
    }
    if (key == "model.vocab_size" && now == 0) continue;  // "the tokenizer's": the saved one
    KIRI_RAISE(kConfig, key, " = ", now.dump(), " contradicts the checkpoint's ", key, " = ",
               saved.dump(), " (", dir,
               "/state.json): a resumed run keeps its model and data shape; drop the ", key,
               " you give, or start a new run (another run.name, or --overwrite)");
  }
  return cfg;
}

// --resume auto: the run folder's latest checkpoint, or "" when it holds none.
std::string latest_checkpoint(const train::RunConfig& run) {
  const std::string& root = run.checkpoint.dir;
  std::error_code ec;
  if (root.empty() ||
      (!std::filesystem::exists(root + "/latest", ec) && ckpt::list_checkpoints(root).empty()))
    return "";
  return ckpt::resolve_checkpoint(root);
}

// ---- The planner's view of a run (train --auto, the out-of-memory advice) ----

// kiri's GPT as the planner's model: GPT-2's structure at the config's dimensions.
plan::ModelSpec plan_model(const train::RunConfig& cfg) {
  plan::ModelSpec m = plan::model_from_dims(cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head,
                                            cfg.model.vocab_size, cfg.model.block_size);
  m.name = str("kiri L", cfg.model.n_layer, " h", cfg.model.n_embd, " V", cfg.model.vocab_size);
  return m;
}

plan::Precision plan_dtype(train::ComputeDType d) {
  switch (d) {
    case train::ComputeDType::kBF16:
      return plan::Precision::kBf16;
    case train::ComputeDType::kF16:
      return plan::Precision::kFp16;
    default:
      return plan::Precision::kFp32;
  }
}

// The run's layout: m = pipeline micro-batches x accumulation steps, B = b·m·dp; every_k
// checkpointing counts as full recomputation (the planner models none and full).
plan::Layout plan_layout(const train::RunConfig& cfg) {
  const train::ParallelConfig& p = cfg.parallel;
  const train::ShardLayout sharding = train::resolve_sharding(p);
  plan::Layout l;
  l.dp = p.dp;
  l.tp = p.tp;
  l.pp = p.pp;
  l.zero_stage = sharding.stage;
  l.shard_group = sharding.group_size;
  l.dtype = plan_dtype(cfg.train.dtype);
  l.recompute = p.activation_checkpointing == train::ActivationCheckpointing::kNone
                    ? plan::Recompute::kNone
                    : plan::Recompute::kFull;
  l.schedule = plan::parse_schedule(p.schedule);
  l.virtual_stages = p.virtual_stages;
  l.micro_batch = cfg.train.micro_batch;
  l.global_batch = cfg.train.micro_batch * p.microbatches * cfg.train.grad_accum * p.dp;
  l.seq_len = cfg.train.seq_len;
  l.wrap_blocks = p.wrap_blocks;
  l.form = plan::ActivationForm::kKiri;
  return l;
}

// Sets the config's layout keys from a planner layout: pp > 1 runs its m micro-batches
// through the pipeline, pp = 1 accumulates them.
void apply_layout(train::RunConfig& cfg, const plan::Layout& l) {
  train::ParallelConfig& p = cfg.parallel;
  p.dp = l.dp;
  p.tp = l.tp;
  p.pp = l.pp;
  p.zero_stage = l.zero_stage;
  p.sharding_strategy.clear();
  p.shard_group_size = 0;
  p.activation_checkpointing = l.recompute == plan::Recompute::kNone
                                   ? train::ActivationCheckpointing::kNone
                                   : train::ActivationCheckpointing::kFull;
  p.schedule = plan::name(l.schedule);
  p.virtual_stages = l.virtual_stages;
  const int64_t m = l.microbatches();
  p.microbatches = l.pp > 1 ? static_cast<int>(m) : 1;
  cfg.train.grad_accum = l.pp > 1 ? 1 : m;
}

// Whether kiri runs the layout (its config rules on top of the planner's).
bool kiri_runs(train::RunConfig cfg, const plan::Layout& l) {
  apply_layout(cfg, l);
  try {
    validate(cfg);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// The share of the limit a layout may fill in the planner's model: the rest is headroom for
// what the model leaves out (transient gathers and copies: kiri's measured peaks run up to
// ~11% over the model under ZeRO 1-3 on small models, docs/planner.md).
constexpr double kHeadroom = 0.85;

// This machine (calibrated when runs/calibration/this-machine.json exists) with kHeadroom of
// `limit` bytes per rank and room for the whole world on its one node.
plan::ClusterSpec plan_cluster(double limit, int world) {
  plan::ClusterSpec c = plan::cluster_preset("this-machine");
  c.memory_bytes = limit * kHeadroom;
  c.devices_per_node = std::max(c.devices_per_node, world);
  c.nodes = 1;
  return c;
}

// The planner's layouts of the world that kiri runs and that fit, fastest first.
std::vector<plan::Evaluation> fitting_layouts(const train::RunConfig& cfg, int world, double limit,
                                              plan::Recommendation* rec) {
  plan::PlanRequest request{plan_model(cfg), plan_cluster(limit, world), world, plan_layout(cfg)};
  const std::vector<plan::Evaluation> all = plan::enumerate_layouts(request);
  if (rec) *rec = plan::recommend(request, all);
  std::vector<plan::Evaluation> out;
  for (const plan::Evaluation& e : all)
    if (e.fits && kiri_runs(cfg, e.layout)) out.push_back(e);
  return out;
}

std::string set_flags(const plan::Layout& l) {
  std::string s =
      str("--set parallel.dp=", l.dp, " --set parallel.tp=", l.tp, " --set parallel.pp=", l.pp,
          " --set parallel.zero_stage=", l.zero_stage, " --set parallel.activation_checkpointing=",
          l.recompute == plan::Recompute::kNone ? "none" : "full");
  if (l.pp > 1)
    s += str(" --set parallel.schedule=", plan::name(l.schedule),
             " --set parallel.microbatches=", l.microbatches());
  return s;
}

// What changes from `from` to `to`, in words ("ZeRO stage 1 over dp 2"), and how many of
// mesh / ZeRO stage / recomputation change (the cheapness of the change).
std::pair<std::string, int> layout_change(const plan::Layout& from, const plan::Layout& to) {
  std::vector<std::string> parts;
  int n = 0;
  const bool mesh = from.dp != to.dp || from.tp != to.tp || from.pp != to.pp;
  if (mesh) {
    ++n;
    parts.push_back(str("dp ", to.dp, " x tp ", to.tp, " x pp ", to.pp,
                        to.pp > 1
                            ? str(" (", plan::name(to.schedule), ", m ", to.microbatches(), ")")
                            : std::string()));
  }
  if (from.zero_stage != to.zero_stage) {
    ++n;
    parts.push_back(to.zero_stage == 0 ? std::string("ZeRO stage 0 (DDP)")
                                       : str("ZeRO stage ", to.zero_stage, " over dp ", to.dp));
  }
  if (from.recompute != to.recompute) {
    ++n;
    parts.push_back(to.recompute == plan::Recompute::kNone
                        ? std::string("no activation recomputation")
                        : std::string("full activation recomputation"));
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return {text, n};
}

std::string mib(double bytes) {
  return format_bytes(static_cast<int64_t>(bytes));
}

double category_bytes(const plan::MemoryBreakdown& m, Category c) {
  switch (c) {
    case Category::kParameters:
      return m.parameters;
    case Category::kGradients:
      return m.gradients;
    case Category::kOptimizerStates:
      return m.optimizer_states;
    case Category::kActivations:
      return m.activations;
    case Category::kBuffers:
      return m.buffers;
    default:
      return 0;
  }
}

// The allocator's out-of-memory advice: the category that overflowed and the cheapest
// layout change on the same world that the planner says fits the limit (fewest of mesh /
// ZeRO stage / recomputation changed, then the fastest).
std::string oom_advice(const train::RunConfig& cfg, int world, const MemoryStats& stats,
                       Category category, int64_t bytes) {
  const double limit = static_cast<double>(stats.limit);
  const plan::Layout current = plan_layout(cfg);
  const plan::ModelSpec model = plan_model(cfg);
  const plan::Evaluation now = plan::evaluate(model, current, plan_cluster(limit, world));
  std::string out =
      str("planner: ", category_name(category), " overflowed (", format_bytes(bytes), " more past ",
          format_bytes(stats.allocated), " of the ", format_bytes(stats.limit),
          " limit); this layout (", current.str(), ") needs ", mib(now.memory.memory.total()),
          " per rank in the planner's model (", category_name(category), " ",
          mib(category_bytes(now.memory.memory, category)), ").");
  plan::Recommendation rec;
  std::vector<plan::Evaluation> fits = fitting_layouts(cfg, world, limit, &rec);
  const plan::Evaluation* best = nullptr;
  for (const plan::Evaluation& e : fits) {
    if (layout_change(current, e.layout).second == 0)
      continue;  // the model says the current layout fits: suggest a real change
    // Cheapest: the fewest changes, a mesh change last, then the smallest step in ZeRO
    // stage (less sharded, fewer collectives), then the modelled step time.
    auto key = [&](const plan::Evaluation& x) {
      const bool mesh =
          x.layout.dp != current.dp || x.layout.tp != current.tp || x.layout.pp != current.pp;
      return std::make_tuple(layout_change(current, x.layout).second, mesh,
                             std::abs(x.layout.zero_stage - current.zero_stage), x.time.step_s);
    };
    if (!best || key(e) < key(*best)) best = &e;
  }
  if (best) {
    out += str("\n", category_name(category),
               " overflowed: ", layout_change(current, best->layout).first, " would need ",
               mib(best->memory.memory.total()), " per rank (", category_name(category), " ",
               mib(category_bytes(best->memory.memory, category)), "; modelled step ",
               best->time.step_s, " s; layouts may fill 85% of the limit, ", mib(limit * kHeadroom),
               "): ", set_flags(best->layout), ", or let kiri train --auto choose");
  } else {
    out += str("\n", category_name(category), " overflowed: no layout of ", world, " rank(s) fits ",
               mib(limit * kHeadroom), " (85% of the limit) per rank in the planner's model");
    if (rec.min_devices > world)
      out += str("; ZeRO stage 3 with full recomputation would fit on ", rec.min_devices,
                 " ranks (kiri launch -n ", rec.min_devices, ")");
    out += "; or raise --mem-limit";
  }
  return out;
}

// train --auto: the planner's fastest layout of this world that fits the limit.
void choose_layout(train::RunConfig& cfg, int world, int rank,
                   const std::optional<std::string>& mem_limit) {
  if (cfg.model.vocab_size == 0)
    cfg.model.vocab_size =
        data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data))->vocab_size();
  // Start from plain data parallelism over the world: b per rank, B = b x accumulation x
  // world (the pipeline's and tensor parallelism's m come out of B).
  const int64_t accum = cfg.train.grad_accum * cfg.parallel.microbatches;
  cfg.parallel.dp = world;
  cfg.parallel.tp = cfg.parallel.pp = 1;
  cfg.parallel.zero_stage = 0;
  cfg.parallel.sharding_strategy.clear();
  cfg.parallel.shard_group_size = 0;
  cfg.parallel.activation_checkpointing = train::ActivationCheckpointing::kNone;
  cfg.parallel.microbatches = 1;
  cfg.parallel.virtual_stages = 1;
  cfg.parallel.schedule = "1f1b";
  cfg.train.grad_accum = accum;
  double limit = 0;
  std::string limit_from;
  if (mem_limit) {
    limit = static_cast<double>(parse_bytes(*mem_limit));
    limit_from = "--mem-limit";
  } else {
    limit = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
            static_cast<double>(sysconf(_SC_PAGESIZE)) / world;
    limit_from = str("this machine's memory / ", world, " rank(s)");
  }
  plan::Recommendation rec;
  const std::vector<plan::Evaluation> fits = fitting_layouts(cfg, world, limit, &rec);
  if (fits.empty()) {
    std::string msg =
        str("kiri train --auto: no layout of ", world, " rank(s) fits 85% of ", mib(limit),
            " per rank (", limit_from, ") in the planner's model: ", rec.message);
    if (rec.min_devices > world)
      msg += str(" (ZeRO stage 3 with full recomputation fits on ", rec.min_devices,
                 " ranks: kiri launch -n ", rec.min_devices, ")");
    KIRI_RAISE(kOutOfMemory, msg);
  }
  const plan::Evaluation& e = fits.front();
  apply_layout(cfg, e.layout);
  if (rank != 0) return;
  const plan::ClusterSpec cluster = plan_cluster(limit, world);
  log::info("auto layout: ", e.layout.str(), " on ", world,
            " rank(s): ", mib(e.memory.memory.total()), " of 85% of ", mib(limit), " per rank (",
            limit_from, "), modelled step ", e.time.step_s, " s; ", fits.size(), " of the ",
            "planner's layouts fit and run in kiri");
  const bool is_best = rec.best && rec.best->layout.str() == e.layout.str();
  log::info("auto layout: why: bottleneck ", rec.bottleneck, " -> cut ", rec.cut, ": ",
            is_best
                ? rec.message
                : str(rec.message, " (kiri does not run that layout: the fastest one it runs)"));
  if (is_best)
    for (const std::string& r : rec.reasons) log::info("auto layout:   - ", r);
  if (const std::string src = plan::describe_sources(cluster); !src.empty())
    log::info("auto layout: ", cluster.name, " ", src);
  log::info("auto layout: the same as ", set_flags(e.layout));
}

// kiri train --dry-run: the checks a run makes before its first step (the config, the
// layout against this job's world, --auto's choice), then the resolved config and a layout
// line from rank 0, without building the model or starting MPI.
int dry_run(train::RunConfig cfg, bool auto_layout, const std::optional<std::string>& mem_limit) {
  const int world = job_size(), rank = std::max(0, job_rank());
  if (auto_layout) {
    choose_layout(cfg, world, rank, mem_limit);
    validate(cfg);
  }
  const std::optional<std::string> inferred = train::resolve_layout(cfg.parallel, world);
  parallel::validate_layout({cfg.parallel.dp, cfg.parallel.tp, cfg.parallel.pp},
                            {world, cfg.model.n_head, cfg.model.n_layer, cfg.train.micro_batch});
  if (rank != 0) return 0;
  if (inferred) std::printf("%s\n", inferred->c_str());
  const plan::Layout l = plan_layout(cfg);
  std::cout << config_to_json(cfg).dump(2) << "\n";
  std::printf(
      "dry run: %s on %d rank(s); %lld sequences of %lld tokens per step, %lld steps; the "
      "config and layout are valid (no training without --dry-run)\n",
      l.str().c_str(), world, static_cast<long long>(l.global_batch),
      static_cast<long long>(l.seq_len), static_cast<long long>(cfg.train.steps));
  return 0;
}

// The run folder before a run: a fresh one refuses a used folder, or with --overwrite
// clears kiri's files there (rank 0); a resumed one keeps it.
void prepare_run_folder(const train::RunConfig& paths, bool resume, bool overwrite,
                        const std::string& from, bool rank0) {
  if (resume) {
    if (from.empty() && rank0)
      log::info("--resume auto: no checkpoint in ", paths.checkpoint.dir, ": starting fresh");
    return;
  }
  if (!overwrite)
    train::refuse_used_run_dir(paths);
  else if (rank0)
    for (const std::string& p : train::clear_run_dir(paths)) log::info("--overwrite: removed ", p);
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("train"));
  const std::string file = config_file(a, 1);
  std::vector<std::string> sets = a.all("set");
  if (auto m = a.get("mem-limit")) sets.push_back("train.mem_limit=" + *m);
  const std::optional<std::string> resume = a.get("resume");
  KIRI_CHECK_KIND(kConfig, !resume || !a.flag("overwrite"),
                  "--overwrite starts the run over and --resume continues it: give one of them");
  const std::optional<std::string> init = a.get("init-from");
  KIRI_CHECK_KIND(kConfig, !init || !resume,
                  "--init-from starts a new run from a model's weights and --resume continues a "
                  "run: give one of them");
  train::RunConfig cfg = load_config(file, sets);
  const std::vector<std::pair<std::string, json>> deepspeed =
      apply_deepspeed_option(a, file, sets, cfg);
  // --auto sets the layout keys itself: the file's would be overridden unseen.
  for (const auto& [key, value] : deepspeed)
    KIRI_CHECK_KIND(kConfig, !a.flag("auto") || key.rfind("parallel.", 0) != 0,
                    "--auto chooses the layout, and --deepspeed ", *a.get("deepspeed"), " sets ",
                    key, " = ", value.dump(),
                    ": drop --auto, or the layout keys (zero_optimization, "
                    "activation_checkpointing) from the DeepSpeed file");
  const std::string init_dir = init ? train::resolve_model_folder(*init) : "";
  if (init) cfg = init_from_config(cfg, init_dir, config_entries(file, sets));
  // The checkpoint to continue: --resume PATH, or --resume auto's find in the run folder.
  std::string from;
  if (resume)
    from = *resume == "auto" ? latest_checkpoint(train::resolve_run_paths(cfg))
                             : ckpt::resolve_checkpoint(*resume);
  if (!from.empty()) {
    std::vector<std::pair<std::string, json>> given = config_entries(file, sets);
    given.insert(given.end(), deepspeed.begin(), deepspeed.end());
    cfg = resumed_config(from, given);
  }
  validate(cfg);
  std::optional<double> peak;  // checked before the trainer's set-up
  if (a.get("peak-flops")) peak = train::check_peak_flops(a.get_double("peak-flops", 0));
  if (a.flag("dry-run")) return dry_run(cfg, a.flag("auto"), a.get("mem-limit"));
  World world = make_world();
  const bool rank0 = world.comm->rank() == 0;
  if (!a.flag("auto")) {  // a layout that cannot run is named first (the Trainer resolves it)
    train::ParallelConfig layout = cfg.parallel;
    train::resolve_layout(layout, world.comm->size());
  }
  const train::RunConfig paths = train::resolve_run_paths(cfg);
  const train::RunLock lock = train::lock_run_folder(paths, *world.comm);  // one run per folder
  prepare_run_folder(paths, resume.has_value(), a.flag("overwrite"), from, rank0);
  // Saves killed midway leave .step_N.tmp folders that no later save of another step
  // reuses: this run owns the folder now, so they go before its first save.
  if (rank0 && !paths.checkpoint.dir.empty())
    for (const std::string& tmp : ckpt::remove_stale_temp_dirs(paths.checkpoint.dir))
      log::info("removed ", tmp, ", left by a save that did not finish");
  if (a.flag("auto")) {
    choose_layout(cfg, world.comm->size(), world.comm->rank(), a.get("mem-limit"));
    validate(cfg);
  }
  // state.json keeps the config as given (dp inferred and lr scaled again on resume);
  // config.json the one the run uses.
  train::Trainer trainer(cfg, *world.comm, config_to_json(cfg).dump(), oom_advice);
  if (peak) trainer.set_peak_flops(*peak);
  if (rank0)
    log::info("run folder ", paths.run.dir, ": config ",
              train::write_run_config(trainer.config(), config_to_json(trainer.config()).dump(2)),
              paths.log.metrics.empty() ? "" : ", metrics " + paths.log.metrics,
              paths.checkpoint.dir.empty() ? "" : ", checkpoints " + paths.checkpoint.dir);
  if (!init_dir.empty()) trainer.init_from(init_dir);
  if (!from.empty()) {
    trainer.load_checkpoint(from);
    if (rank0) log::info("resumed from ", from, " at step ", trainer.step());
  }
  trainer.run();
  return 0;
}

int cmd_config(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("config"));
  if (a.flag("markdown")) {
    std::cout << config_markdown();
    return 0;
  }
  std::cout << config_to_json(config_of(a, 1)).dump(2) << "\n";
  return 0;
}

// The bounds of sample's --tokens and eval's --batches (train.eval_batches' own).
constexpr int64_t kMaxSampleTokens = int64_t{1} << 20;
constexpr int64_t kMaxEvalBatches = int64_t{1} << 20;

int cmd_sample(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("sample"));
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri sample takes one CKPT_DIR");
  const std::string dir = ckpt::resolve_checkpoint(a.positional()[0]);
  train::RunConfig cfg = checkpoint_config(dir);
  auto tokenizer = data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = tokenizer->vocab_size();
  Allocator allocator;
  model::GPT<float> model(cfg.model);
  nn::ParameterStore store(model.parameters(), DType::kF32, allocator);
  train::HfWeights file = train::HfWeights::open(dir);
  for (nn::Parameter* p : store.parameters()) {
    file.read(p->name, p->value);
    train::check_finite(p->value, file.path_of(p->name) + ": tensor " + p->name);
  }

  train::SampleOptions o;
  o.tokens = a.get_int("tokens", 100);
  o.temperature = a.get_double("temperature", 0.8);
  const int64_t top_k = a.get_int("top-k", 0), seed = a.get_int("seed", 0);
  // Checked before the narrowing casts: 2^40 would wrap to a small top-k, -1 to a huge seed.
  KIRI_CHECK_KIND(kConfig, o.tokens >= 0 && o.tokens <= kMaxSampleTokens,
                  "--tokens must be in [0, ", kMaxSampleTokens, "], got ", o.tokens);
  KIRI_CHECK_KIND(kConfig, o.temperature >= 0 && std::isfinite(o.temperature),
                  "--temperature must be a finite number >= 0, got ", o.temperature);
  KIRI_CHECK_KIND(kConfig, top_k >= 0 && top_k <= tokenizer->vocab_size(),
                  "--top-k must be in [0, ", tokenizer->vocab_size(),
                  "] (0: all; the vocabulary's size), got ", top_k);
  KIRI_CHECK_KIND(kConfig, seed >= 0, "--seed must not be negative, got ", seed);
  o.top_k = static_cast<int>(top_k);
  o.seed = static_cast<uint64_t>(seed);
  std::string prompt = a.get("prompt").value_or("\n");
  std::vector<int32_t> ids = tokenizer->encode(prompt);
  KIRI_CHECK_KIND(kConfig, !ids.empty(), "--prompt must not be empty");
  std::vector<int32_t> out = train::generate(model, allocator, ids, o, tokenizer->vocab_size());
  std::cout << tokenizer->decode(out) << std::endl;
  return 0;
}

int cmd_eval(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("eval"));
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri eval takes one CKPT_DIR");
  train::RunConfig cfg = checkpoint_config(a.positional()[0]);
  // Zero batches averaged nothing and printed val_loss -nan: train.eval_batches' range.
  const int64_t batches = a.get_int("batches", cfg.train.eval_batches);
  KIRI_CHECK_KIND(kConfig, batches >= 1 && batches <= kMaxEvalBatches, "--batches must be in [1, ",
                  kMaxEvalBatches, "], got ", batches);
  cfg.log.metrics.clear();
  // A checkpoint holds the full model whatever layout wrote it: evaluate on one process.
  cfg.parallel.dp = cfg.parallel.tp = cfg.parallel.pp = 1;
  cfg.parallel.zero_stage = cfg.parallel.shard_group_size = 0;
  cfg.parallel.sharding_strategy.clear();
  cfg.train.lr_scaling = train::LrScaling::kNone;  // no optimizer step
  train::Trainer trainer(cfg, "");
  trainer.load_checkpoint(a.positional()[0]);
  const double loss = trainer.evaluate(batches);
  std::printf("val_loss %.6f (step %lld)\n", loss, static_cast<long long>(trainer.step()));
  return 0;
}

int cmd_data(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("data"));
  KIRI_CHECK_KIND(kConfig, a.get("out").has_value(), "kiri data needs --out DIR");
  train::DataConfig dc;
  dc.assets = a.get("assets").value_or("");
  auto tokenizer =
      data::make_tokenizer(a.get("tokenizer").value_or("gpt2"), train::resolve_data_dir(dc));
  data::DocumentOptions opts;
  opts.format = data::parse_input_format(a.get("format").value_or("auto"));
  opts.separator = a.get("separator").value_or("");
  opts.text_key = a.get("text-key").value_or("text");
  KIRI_CHECK_KIND(kConfig, !opts.text_key.empty(), "--text-key must not be empty");
  const double val_fraction = a.get_double("val-fraction", 0.1);
  KIRI_CHECK_KIND(kConfig, val_fraction > 0 && val_fraction < 1,
                  "--val-fraction must lie strictly between 0 and 1, got ", val_fraction);
  const data::PreparedCorpus p = data::build_corpus(data::expand_inputs(a.positional()), *tokenizer,
                                                    *a.get("out"), val_fraction, opts);
  std::printf("%s: %lld tokens\n%s: %lld tokens\n%lld documents\n", p.train_path.c_str(),
              static_cast<long long>(p.train_tokens), p.val_path.c_str(),
              static_cast<long long>(p.val_tokens), static_cast<long long>(p.documents));
  return 0;
}

}  // namespace kiri::cli
