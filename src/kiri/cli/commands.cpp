#include "kiri/cli/commands.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/log.h"
#include "kiri/base/stop_signal.h"
#include "kiri/base/units.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/cli/args.h"
#include "kiri/cli/config_flags.h"
#include "kiri/cli/init_from.h"
#include "kiri/cli/report.h"
#include "kiri/cli/train_planning.h"
#include "kiri/cli/verbs.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/deepspeed_config.h"
#include "kiri/data/chat_template.h"
#include "kiri/data/corpus.h"
#include "kiri/launch/status.h"
#include "kiri/launch/world.h"
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

// The keys the command line gives after the config file, as KEY=VALUE in order: the familiar
// flags' (--lr, --bf16, ...: config_flags.h), --set's, --mem-limit's.
std::vector<std::string> command_sets(const Args& a) {
  std::vector<std::string> sets = merge_flag_sets(config_flag_sets(a), a.all("set"));
  if (auto m = a.get("mem-limit")) sets.push_back("train.mem_limit=" + *m);
  return sets;
}

// --deepspeed FILE: the DeepSpeed config's keys over `cfg` (the kiri file's and --set's,
// which a key of the file must agree with); the keys it accepts with no effect are logged
// (rank 0, stderr). Returns what it set (an empty one without --deepspeed): a resumed run
// applies its entries again, and validation names its JSON paths.
DeepSpeedConfig apply_deepspeed_option(const Args& a, const std::string& file,
                                       const std::vector<std::string>& sets, kiri::RunConfig& cfg,
                                       int world = launch::job_size()) {
  const std::optional<std::string> path = a.get("deepspeed");
  if (!path) return {cfg, {}, {}, {}};
  DeepSpeedConfig ds = load_deepspeed(*path, cfg, config_entries(file, sets), world);
  if (launch::job_rank() <= 0)
    for (const std::string& note : ds.notes) log::info("--deepspeed ", *path, ": ", note);
  cfg = ds.config;
  return ds;
}

// The config of kiri config: file, the familiar flags and --set, --mem-limit, --deepspeed.
kiri::RunConfig config_of(const Args& a, size_t max_positional) {
  const std::string file = config_file(a, max_positional);
  const std::vector<std::string> sets = command_sets(a);
  kiri::RunConfig cfg = load_config(file, sets);
  const DeepSpeedConfig ds = apply_deepspeed_option(a, file, sets, cfg);
  validate_deepspeed(cfg, ds.path_of, a.get("deepspeed").value_or(""));
  return cfg;
}

// The run config stored in a checkpoint's state.json (the config the run was given:
// parallel.dp, the learning rates and the {run.dir} paths before their resolution).
kiri::RunConfig checkpoint_config(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  const ckpt::CheckpointState state = ckpt::read_checkpoint_state(dir);
  KIRI_CHECK_KIND(kCheckpoint, state.config.is_object(), dir, "/state.json has no config");
  return config_from_json(state.config);
}

// The keys that a resumed run keeps from its checkpoint: they fix the parameters'
// shapes and what the data position counts (samples of seq_len tokens of one corpus).
bool is_saved_shape_key(const std::string& key) {
  return key.rfind("model.", 0) == 0 || key == "data.tokenizer" || key == "data.corpus" ||
         key == "data.dir" || key == "data.val_fraction" || key == "train.seq_len";
}

// A key the command gives, and where: "the config file F", "--set", "--mem-limit" or
// "--deepspeed F" (a resume's messages name it).
struct GivenKey {
  std::string key;
  json value;
  std::string source;
};

// The keys of the command in the order the first start applied them: the file's, --set's
// (then --mem-limit's), the DeepSpeed file's.
std::vector<GivenKey> given_keys(const Args& a, const std::string& file,
                                 const std::vector<std::string>& sets,
                                 const std::vector<std::pair<std::string, json>>& deepspeed) {
  const size_t from_file = file.empty() ? 0 : config_entries(file, {}).size();
  std::vector<std::string> sources;  // of command_sets' entries, in its order
  for (const FlagSet& f : config_flag_sets(a)) sources.push_back(f.flag);
  sources.resize(sources.size() + a.all("set").size(), "--set");
  sources.push_back("--mem-limit");
  std::vector<GivenKey> out;
  for (auto& [key, value] : config_entries(file, sets)) {
    const size_t i = out.size();
    out.push_back({key, value,
                   i < from_file ? "the config file " + file
                                 : sources[std::min(i - from_file, sources.size() - 1)]});
  }
  for (const auto& [key, value] : deepspeed)
    out.push_back({key, value, "--deepspeed " + a.get("deepspeed").value_or("")});
  return out;
}

// --resume: the checkpoint's config with the given keys applied on top as the first start
// applied them (in order: a --set after the file's key wins). Only a saved shape key whose
// final value differs from the checkpoint's is a kConfig error, naming both values and
// where each came from.
kiri::RunConfig resumed_config(const std::string& dir, const std::vector<GivenKey>& given) {
  const kiri::RunConfig saved = checkpoint_config(dir);
  kiri::RunConfig cfg = saved;
  std::map<std::string, const GivenKey*> last;  // where each key's final value came from
  for (const GivenKey& g : given) {
    apply_key(cfg, g.key, g.value);
    last[g.key] = &g;
  }
  // train.steps given to a run that counted epochs: the steps, as a fresh run would refuse both.
  if (last.count("train.steps") && !last.count("train.epochs")) apply_key(cfg, "train.epochs", 0);
  for (const auto& [key, g] : last) {
    const json was = get_key(saved, key), now = get_key(cfg, key);
    if (!is_saved_shape_key(key) || now == was) continue;
    if (key == "model.vocab_size" && now == 0) {  // "the tokenizer's": the saved one
      apply_key(cfg, key, was);
      continue;
    }
    KIRI_RAISE(kConfig, key, " = ", now.dump(), " (", g->source, ") contradicts the checkpoint's ",
               key, " = ", was.dump(), " (", dir,
               "/state.json): a resumed run keeps its model and data shape; drop the ", key,
               " you give, or start a new run (another run.name, or --overwrite)");
  }
  return cfg;
}

// --resume auto: the run folder's latest checkpoint, or its newest complete one when `latest`
// is missing or names an incomplete one (a save killed before `latest` was written), or ""
// when it holds none.
std::string latest_checkpoint(const kiri::RunConfig& run) {
  const std::string& root = run.checkpoint.dir;
  if (root.empty()) return "";
  std::string note;
  const std::string dir = ckpt::find_resume_checkpoint(root, &note);
  if (!note.empty() && log::rank() <= 0) log::warn("--resume auto: ", note);
  return dir;
}

// The run folder before a run: a fresh one refuses a used folder, or with --overwrite
// clears kiri's files there (rank 0); a resumed one keeps it.
void prepare_run_folder(const kiri::RunConfig& paths, bool resume, bool overwrite,
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

namespace {

// The config a train run starts from (file, --set, --deepspeed, and --init-from's model or
// --resume's checkpoint on top), validated, with the checkpoint to continue ("" for none)
// and the model folder to start from ("" for none).
struct TrainStart {
  kiri::RunConfig cfg;
  std::string from;
  std::string init_dir;
  // A resume: the checkpoint's config and global batch (0 when its state.json has none).
  kiri::RunConfig saved;
  int64_t saved_batch = 0;
};
TrainStart resolve_train_start(const Args& a, const std::string& file,
                               const std::vector<std::string>& sets,
                               const std::optional<std::string>& resume,
                               const std::optional<std::string>& init, int world) {
  TrainStart s{load_config(file, sets), "", "", {}, 0};
  kiri::RunConfig& cfg = s.cfg;
  const DeepSpeedConfig ds = apply_deepspeed_option(a, file, sets, cfg, world);
  const std::vector<std::pair<std::string, json>>& deepspeed = ds.entries;
  // --auto sets the layout keys itself: the file's would be overridden unseen.
  for (const auto& [key, value] : deepspeed)
    KIRI_CHECK_KIND(kConfig, !a.flag("auto") || key.rfind("parallel.", 0) != 0,
                    "--auto chooses the layout, and --deepspeed ", *a.get("deepspeed"), " sets ",
                    key, " = ", value.dump(),
                    ": drop --auto, or the layout keys (zero_optimization, "
                    "activation_checkpointing) from the DeepSpeed file");
  use_shards_tokenizer(cfg, config_entries(file, sets));
  if (init) {
    s.init_dir = ckpt::resolve_model_folder(*init);
    cfg = init_from_config(cfg, s.init_dir, config_entries(file, sets));
  }
  // The checkpoint to continue: --resume PATH, or --resume auto's find in the run folder.
  std::string& from = s.from;
  if (resume)
    from = *resume == "auto" ? latest_checkpoint(kiri::resolve_run_paths(cfg))
                             : ckpt::resolve_checkpoint(*resume);
  if (!from.empty()) {
    cfg = resumed_config(from, given_keys(a, file, sets, deepspeed));
    s.saved = checkpoint_config(from);
    s.saved_batch = ckpt::read_checkpoint_state(from).global_batch;
  }
  validate_deepspeed(cfg, ds.path_of, a.get("deepspeed").value_or(""));
  return s;
}

// The global batch a resume keeps (nullopt: none to keep): the checkpoint's, unless the
// command changes the keys it is made of (train.micro_batch, train.grad_accum,
// parallel.microbatches): then the command's, which the log names.
std::optional<int64_t> resumed_batch(const TrainStart& s, int world) {
  if (s.from.empty() || s.saved_batch == 0) return std::nullopt;
  std::string changed;
  for (const char* key : {"train.micro_batch", "train.grad_accum", "parallel.microbatches"})
    if (get_key(s.cfg, key) != get_key(s.saved, key))
      changed += str(changed.empty() ? "" : ", ", key, " = ", get_key(s.cfg, key).dump(),
                     " (the checkpoint's ", get_key(s.saved, key).dump(), ")");
  if (changed.empty()) return s.saved_batch;
  kiri::RunConfig now = s.cfg;
  kiri::resolve(now, {.world = world});
  if (launch::job_rank() <= 0 && kiri::global_batch(now) != s.saved_batch)
    log::info("--resume: ", changed, " changes the global batch from the checkpoint's ",
              s.saved_batch, " to ", kiri::global_batch(now), " sequences");
  return std::nullopt;
}

}  // namespace

kiri::RunConfig train_command_paths(const std::vector<std::string>& argv, int world) {
  Args a(argv, verb_spec("train"));
  const std::string file = config_file(a, 1);
  const std::vector<std::string> sets = command_sets(a);
  const std::optional<std::string> init = a.get("init-from");
  const std::optional<std::string> resume = a.get("resume");
  // Quiet: the ranks log the same notes (--deepspeed's, --resume's) once they start.
  struct Quiet {
    log::Level was = log::level();
    Quiet() { log::set_level(log::Level::kError); }
    ~Quiet() { log::set_level(was); }
  } quiet;
  const kiri::RunConfig cfg =
      resolve_train_start(a, file, sets, resume, resume ? std::nullopt : init, world).cfg;
  if (!a.flag("auto") && !a.get("global-batch")) {  // cmd_train's first check on the world
    kiri::RunConfig resolved = cfg;
    kiri::resolve(resolved, {.world = world});
  }
  return kiri::resolve_run_paths(cfg);
}

// A tp or shard group across hosts (the Trainer warns of it): the planner's cost of it, once.
static void warn_cross_host_cost(train::Trainer& trainer, comm::Communicator& world) {
  const model::ParallelOptions po =
      model::parallel_options(trainer.config().parallel, trainer.config().train.dtype);
  if (trainer.dims().groups_across_hosts(po.zero_stage > 0 ? po.shard_group_size : 0).empty())
    return;
  const HostLayout hosts = measure_hosts(world);  // collective: every rank knows the groups
  if (world.rank() == 0)
    log::warn("a group spans hosts: ", cross_host_cost(trainer.config(), world.size(), hosts));
}

// --resume auto on a run that has reached train.steps: says so, exits 0.
static int finished_already(const train::Trainer& trainer, const std::string& from) {
  const int64_t steps = trainer.config().train.steps;
  if (trainer.is_rank0())
    log::info("the run has finished: ", from, " is step ", trainer.step(), " and train.steps is ",
              steps, "; nothing to train (raise train.steps, e.g. --set train.steps=", 2 * steps,
              ", to train on)");
  launch::record_launch_exit(0);
  return 0;
}

// The steps, to train.steps or to a stop signal's checkpoint (base/stop_signal.h).
static int train_to_the_end(train::Trainer& trainer) {
  {
    const StopSignals stop_signals;  // from here a SIGTERM, SIGINT or SIGUSR1 saves, then stops
    trainer.run();
  }
  if (const train::Trainer::Stop& stop = trainer.stopped(); stop.signal) {
    if (trainer.is_rank0())
      log::info("stopped by ", signal_name(stop.signal), " after step ", trainer.step(), " of ",
                trainer.config().train.steps, ": ",
                stop.checkpoint.empty() ? std::string("no checkpoint.dir, so nothing was saved")
                                        : "saved " + stop.checkpoint +
                                              "; continue with the same command and --resume auto");
    return 128 + stop.signal;  // as a shell reports a process the signal ended
  }
  // Finished: said before MPI_Finalize, which waits for every host, so that kiri launch can
  // tell a finished job from a lost one when a host's link goes down at the very end.
  launch::record_launch_exit(0);
  return 0;
}

int cmd_train(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("train"));
  const std::string file = config_file(a, 1);
  const std::vector<std::string> sets = command_sets(a);
  const std::optional<std::string> resume = a.get("resume");
  KIRI_CHECK_KIND(kConfig, !resume || !a.flag("overwrite"),
                  "--overwrite starts the run over and --resume continues it: give one of them");
  const std::optional<std::string> init = a.get("init-from");
  KIRI_CHECK_KIND(kConfig, !init || !resume,
                  "--init-from starts a new run from a model's weights and --resume continues a "
                  "run: give one of them");
  TrainStart start = resolve_train_start(a, file, sets, resume, init, launch::job_size());
  kiri::RunConfig& cfg = start.cfg;
  const std::string& from = start.from;
  const std::string& init_dir = start.init_dir;
  std::optional<double> peak;  // checked before the trainer's set-up
  if (a.get("peak-flops")) peak = train::check_peak_flops(a.get_double("peak-flops", 0));
  std::optional<int64_t> keep_batch;  // --global-batch, else a resume's
  std::string keep_from;              // the checkpoint whose global batch is kept
  if (a.get("global-batch")) {
    keep_batch = a.get_int("global-batch", 0);
    KIRI_CHECK_KIND(kConfig, *keep_batch >= 1 && *keep_batch <= (int64_t{1} << 40),
                    "--global-batch must be in [1, 2^40], got ", *keep_batch);
  } else if ((keep_batch = resumed_batch(start, launch::job_size()))) {
    keep_from = from;
  }
  if (a.flag("dry-run"))
    return dry_run(cfg, a.flag("auto"), a.get("mem-limit"), keep_batch, keep_from);
  launch::World world = launch::make_world();
  const bool rank0 = world.comm->rank() == 0;
  if (!a.flag("auto")) {  // a layout that cannot run is named first (the Trainer resolves it)
    kiri::RunConfig resolved = cfg;
    kiri::resolve(resolved, {.world = world.comm->size()});
  }
  const kiri::RunConfig paths = kiri::resolve_run_paths(cfg);
  const train::RunLock lock = train::lock_run_folder(paths, *world.comm);  // one run per folder
  prepare_run_folder(paths, resume.has_value(), a.flag("overwrite"), from, rank0);
  // Saves killed midway leave .step_N.tmp folders that no later save of another step
  // reuses: this run owns the folder now, so they go before its first save.
  if (rank0 && !paths.checkpoint.dir.empty())
    for (const std::string& tmp : ckpt::remove_stale_temp_dirs(paths.checkpoint.dir))
      log::info("removed ", tmp, ", left by a save that did not finish");
  if (a.flag("auto")) {
    if (keep_batch) plan_for_global_batch(cfg, *keep_batch, world.comm->size());
    choose_layout(cfg, world.comm->size(), world.comm->rank(), a.get("mem-limit"),
                  measure_hosts(*world.comm));
  }
  if (keep_batch)
    if (const std::string note =
            keep_from.empty()
                ? fit_global_batch(cfg, *keep_batch, world.comm->size())
                : keep_checkpoint_batch(cfg, *keep_batch, world.comm->size(), keep_from);
        rank0 && !note.empty())
      log::info(note);
  if (a.flag("auto") || keep_batch) validate(cfg);
  // state.json keeps the config as given (dp inferred and lr scaled again on resume);
  // config.json the one the run uses.
  train::Trainer trainer(cfg, *world.comm, config_to_json(cfg).dump(), oom_advice);
  if (peak) trainer.set_peak_flops(*peak);
  trainer.set_verbose_progress(verbose());
  warn_cross_host_cost(trainer, *world.comm);
  if (rank0)
    log::info("run folder ", paths.run.dir, ": config ",
              train::write_run_config(trainer.config(), config_to_json(trainer.config()).dump(2)),
              paths.log.metrics.empty() ? "" : ", metrics " + paths.log.metrics,
              paths.checkpoint.dir.empty() ? "" : ", checkpoints " + paths.checkpoint.dir);
  if (!init_dir.empty()) trainer.init_from(init_dir);
  if (!from.empty()) {
    trainer.accept_data_change(a.flag("accept-data-change"));
    trainer.load_checkpoint(from);
    if (rank0) log::info("resumed from ", from, " at step ", trainer.step());
    if (trainer.step() >= trainer.config().train.steps) return finished_already(trainer, from);
  }
  return train_to_the_end(trainer);
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

int cmd_data(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("data"));
  KIRI_CHECK_KIND(kConfig, a.get("out").has_value(), "kiri data needs --out DIR");
  kiri::DataConfig dc;
  dc.assets = a.get("assets").value_or("");
  auto tokenizer =
      data::make_tokenizer(a.get("tokenizer").value_or("gpt2"), train::resolve_data_dir(dc));
  data::DocumentOptions opts;
  opts.format = data::parse_input_format(a.get("format").value_or("auto"));
  opts.separator = a.get("separator").value_or("");
  opts.text_key = a.get("text-key").value_or("text");
  const std::string tmpl = a.get("chat-template").value_or("simple");
  KIRI_CHECK_KIND(kConfig, tmpl == "simple" || tmpl == "tokenizer",
                  "--chat-template must be simple or tokenizer, got '", tmpl, "'");
  if (tmpl == "tokenizer") {
    const data::TokenizerChatTemplate t =
        data::read_tokenizer_chat_template(a.get("tokenizer").value_or("gpt2"));
    opts.chat_template = t.source;
    opts.bos_token = t.bos_token;
    opts.eos_token = t.eos_token;
  }
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
