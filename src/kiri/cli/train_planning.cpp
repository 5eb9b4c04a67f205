// The planner's view of a kiri train run (train_planning.h).
#include "kiri/cli/train_planning.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/base/units.h"
#include "kiri/config/config_schema.h"
#include "kiri/launch/world.h"
#include "kiri/parallel/dims.h"
#include "kiri/plan/calibration.h"
#include "kiri/plan/planner.h"
#include "kiri/train/offload_io.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

using nlohmann::json;

// kiri's model as the planner's: GPT-2's or LLaMA's structure at the config's dimensions.
plan::ModelSpec plan_model(const kiri::RunConfig& cfg) {
  const kiri::GPTConfig& c = cfg.model;
  plan::ModelSpec m =
      c.llama() ? plan::llama_from_dims(c.n_layer, c.n_embd, c.n_head, c.kv_heads(), c.mlp_width(),
                                        c.vocab_size, c.tie_word_embeddings, c.block_size)
                : plan::model_from_dims(c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.block_size);
  m.name =
      str("kiri ", c.llama() ? "llama " : "", "L", c.n_layer, " h", c.n_embd, " V", c.vocab_size);
  return m;
}

// The run's layout: m = pipeline micro-batches x accumulation steps, B = b·m·dp; every_k
// checkpointing counts as full recomputation; selective is the planner's selective.
plan::Layout plan_layout(const kiri::RunConfig& cfg) {
  plan::Layout l;
  static_cast<kiri::Layout&>(l) = cfg.parallel;
  // selective: its modules (kConfig: an unknown one, or modules without selective)
  const kiri::RecomputeModules modules = kiri::recompute_modules_of(
      l.activation_checkpointing, l.recompute_modules, kiri::LayoutWords::kConfig);
  if (l.activation_checkpointing == kiri::ActivationCheckpointing::kSelective) l.modules = modules;
  l.dtype = cfg.train.dtype;
  l.offload = kiri::offload_spec(cfg.offload);  // cpu offload: validate refuses it
  l.zero_stage = l.stage();  // the planner reads the stage; the strategy has decided it
  l.sharding_strategy = kiri::ShardingStrategy::kFromZeroStage;
  if (l.activation_checkpointing == kiri::ActivationCheckpointing::kEveryK)
    l.activation_checkpointing = kiri::ActivationCheckpointing::kFull;
  l.micro_batch = cfg.train.micro_batch;
  l.global_batch = cfg.train.micro_batch * cfg.parallel.microbatches * cfg.train.grad_accum * l.dp;
  l.seq_len = cfg.train.seq_len;
  l.wrap_blocks = cfg.parallel.wrap_blocks;
  l.form = plan::ActivationForm::kKiri;
  return l;
}

namespace {

// Sets the config's layout keys from a planner layout: pp > 1 runs its m micro-batches
// through the pipeline, pp = 1 accumulates them.
void apply_layout(kiri::RunConfig& cfg, const plan::Layout& l) {
  kiri::Layout& p = cfg.parallel;
  p.dp = l.dp;
  p.tp = l.tp;
  p.pp = l.pp;
  p.zero_stage = l.zero_stage;
  p.sharding_strategy = ShardingStrategy::kFromZeroStage;
  p.shard_group_size = 0;
  // none, selective (its modules from the config, else the default) or full: what the
  // planner enumerates.
  p.activation_checkpointing = l.activation_checkpointing;
  if (l.activation_checkpointing != kiri::ActivationCheckpointing::kSelective)
    p.recompute_modules.clear();
  p.schedule = l.schedule;
  p.virtual_stages = l.virtual_stages;
  const int64_t m = l.step_microbatches();
  p.microbatches = l.pp > 1 ? static_cast<int>(m) : 1;
  cfg.train.grad_accum = l.pp > 1 ? 1 : m;
  // The planner's tiers are none or nvme (cpu and auto never come back from it).
  cfg.offload.optimizer = l.offload.optimizer;
  cfg.offload.parameters = l.offload.parameters;
  cfg.offload.gradients = l.offload.gradients;
}

// Whether kiri runs the layout (its config rules on top of the planner's).
bool kiri_runs(kiri::RunConfig cfg, const plan::Layout& l) {
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
plan::ClusterSpec plan_cluster(double limit, int world, const HostLayout& hosts = {}) {
  plan::ClusterSpec c = plan::cluster_preset("this-machine");
  c.memory_bytes = limit * kHeadroom;
  c.devices_per_node = std::max(c.devices_per_node, world);
  c.nodes = 1;
  if (hosts.hosts > 1 && hosts.ranks_per_host > 0 && hosts.bandwidth > 0) {
    c.nodes = hosts.hosts;
    c.devices_per_node = hosts.ranks_per_host;
    c.nics_per_node = 1;  // a host's ranks share its link
    c.inter = {hosts.bandwidth, hosts.latency};
    c.assumed.push_back("inter-node link as measured between the hosts");
  }
  return c;
}

// The planner's layouts of the world that kiri runs and that fit, fastest first.
std::vector<plan::Evaluation> fitting_layouts(const kiri::RunConfig& cfg, int world, double limit,
                                              plan::Recommendation* rec,
                                              const HostLayout& hosts = {}) {
  plan::PlanRequest request{plan_model(cfg), plan_cluster(limit, world, hosts), world,
                            plan_layout(cfg)};
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
          l.activation_checkpointing == plan::Recompute::kNone ? "none" : "full");
  if (l.pp > 1)
    s += str(" --set parallel.schedule=", plan::name(l.schedule),
             " --set parallel.microbatches=", l.step_microbatches());
  if (l.offload.any())
    s += str(" --set offload.optimizer=", plan::name(l.offload.optimizer),
             " --set offload.parameters=", plan::name(l.offload.parameters),
             " --set offload.gradients=", plan::name(l.offload.gradients));
  return s;
}

// What changes from `from` to `to`, in words ("ZeRO stage 1 over dp 2"), and how many of
// mesh / ZeRO stage / recomputation / offload change (the cheapness of the change).
std::pair<std::string, int> layout_change(const plan::Layout& from, const plan::Layout& to) {
  std::vector<std::string> parts;
  int n = 0;
  const bool mesh = from.dp != to.dp || from.tp != to.tp || from.pp != to.pp;
  if (mesh) {
    ++n;
    parts.push_back(
        str("dp ", to.dp, " x tp ", to.tp, " x pp ", to.pp,
            to.pp > 1 ? str(" (", plan::name(to.schedule), ", m ", to.step_microbatches(), ")")
                      : std::string()));
  }
  if (from.zero_stage != to.zero_stage) {
    ++n;
    parts.push_back(to.zero_stage == 0 ? std::string("ZeRO stage 0 (DDP)")
                                       : str("ZeRO stage ", to.zero_stage, " over dp ", to.dp));
  }
  if (from.activation_checkpointing != to.activation_checkpointing) {
    ++n;
    parts.push_back(to.activation_checkpointing == plan::Recompute::kNone
                        ? std::string("no activation recomputation")
                        : std::string("full activation recomputation"));
  }
  if (from.offload.optimizer != to.offload.optimizer ||
      from.offload.parameters != to.offload.parameters ||
      from.offload.gradients != to.offload.gradients) {
    ++n;
    std::vector<std::string> off;
    if (to.offload.optimizer == plan::OffloadTarget::kNvme) off.push_back("optimizer states");
    if (to.offload.parameters == plan::OffloadTarget::kNvme) off.push_back("parameters");
    if (to.offload.gradients == plan::OffloadTarget::kNvme) off.push_back("gradients");
    std::string what;
    for (size_t i = 0; i < off.size(); ++i)
      what += (i == 0 ? "" : i + 1 == off.size() ? " and " : ", ") + off[i];
    parts.push_back(off.empty() ? std::string("no offload") : "the " + what + " offloaded to NVMe");
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

// For a layout that offloads: its NVMe bytes and its predicted slowdown against the same
// layout without offload (which does not fit); "" otherwise.
std::string offload_note(const plan::ModelSpec& model, const plan::ClusterSpec& cluster,
                         const plan::Evaluation& e) {
  if (!e.layout.offload.any()) return "";
  plan::Layout plain = e.layout;
  plain.offload.optimizer = plain.offload.parameters = plan::OffloadTarget::kNone;
  const double without = plan::estimate_time(model, plain, cluster).step_s;
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.3f", e.time.step_s / without);
  return str("; ", mib(e.memory.memory.nvme.total()), " per rank on NVMe under offload.path, ",
             mib(e.time.disk_read_bytes), " read and ", mib(e.time.disk_write_bytes),
             " written per step, predicted slowdown ", ratio,
             "x against the same layout without offload (disk ", cluster.disk.read_bandwidth / 1e9,
             " GB/s read, ", cluster.disk.write_bandwidth / 1e9, " GB/s write, ",
             cluster.disk.measured ? "calibrated" : "assumed: kiri plan --calibrate measures it",
             ")");
}

}  // namespace

// The allocator's out-of-memory advice: the category that overflowed and the cheapest
// layout change on the same world that the planner says fits the limit (fewest of mesh /
// ZeRO stage / recomputation changed, then the fastest).
std::string oom_advice(const kiri::RunConfig& cfg, int world, const MemoryStats& stats,
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
               offload_note(model, plan_cluster(limit, world), *best),
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
HostLayout measure_hosts(comm::Communicator& world) {
  const parallel::HostMap h = parallel::gather_host_map(world);
  HostLayout out;
  out.hosts = h.hosts;
  if (h.hosts == 1) return out;
  std::vector<int> count(static_cast<size_t>(h.hosts));
  for (int x : h.host_of) ++count[static_cast<size_t>(x)];
  if (std::all_of(count.begin(), count.end(), [&](int c) { return c == count[0]; }))
    out.ranks_per_host = count[0];
  Allocator alloc;
  Tensor link = Tensor::zeros({2}, DType::kF64, Category::kOther, alloc);  // bytes/s, s
  std::unique_ptr<comm::Communicator> firsts = world.split(
      h.local_rank == 0 ? 0 : -1, h.host_of[static_cast<size_t>(world.rank())], "hosts");
  if (firsts) {
    // A ring all-reduce moves 2 (n - 1) / n of the buffer over each link; the first call of
    // each size opens connections and is not timed.
    constexpr int64_t kBytes = 4 << 20;
    Tensor small = Tensor::zeros({1}, DType::kF32, Category::kOther, alloc);
    Tensor big = Tensor::zeros({kBytes / 4}, DType::kF32, Category::kOther, alloc);
    firsts->all_reduce(small, comm::ReduceOp::kSum);
    Timer t;
    firsts->all_reduce(small, comm::ReduceOp::kSum);
    const double latency = t.seconds();
    firsts->all_reduce(big, comm::ReduceOp::kSum);
    t.reset();
    firsts->all_reduce(big, comm::ReduceOp::kSum);
    const double n = firsts->size();
    link.data<double>()[0] = 2 * (n - 1) / n * kBytes / std::max(t.seconds() - latency, 1e-9);
    link.data<double>()[1] = latency;
  }
  world.broadcast(link, 0);  // every rank plans with the same numbers
  out.bandwidth = link.data<double>()[0];
  out.latency = link.data<double>()[1];
  return out;
}

std::string cross_host_cost(const kiri::RunConfig& cfg, int world, const HostLayout& hosts) {
  const double limit = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                       static_cast<double>(sysconf(_SC_PAGESIZE)) / world;
  plan::ClusterSpec across = plan_cluster(limit, world);
  across.nodes = world;  // every group on the link, as laid out
  across.devices_per_node = 1;
  across.nics_per_node = 1;
  across.inter = {hosts.bandwidth, hosts.latency};
  const plan::ClusterSpec one_host = plan_cluster(limit, world);
  const plan::Layout layout = plan_layout(cfg);
  const double a = plan::evaluate(plan_model(cfg), layout, across).time.step_s;
  const double b = plan::evaluate(plan_model(cfg), layout, one_host).time.step_s;
  return str("the planner models this step at ", a,
             " s with its groups on the link between hosts (", mib(hosts.bandwidth),
             "/s as measured) against ", b, " s inside one host (", b > 0 ? a / b : 0.0, "x)");
}

void choose_layout(kiri::RunConfig& cfg, int world, int rank,
                   const std::optional<std::string>& mem_limit, const HostLayout& hosts) {
  const auto tokenizer =
      data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
  kiri::resolve(cfg, {.tokenizer_vocab = tokenizer->vocab_size(), .tokenizer = tokenizer->name()});
  // Start from plain data parallelism over the world: b per rank, B = b x accumulation x
  // world (the pipeline's and tensor parallelism's m come out of B).
  const int64_t accum = cfg.train.grad_accum * cfg.parallel.microbatches;
  cfg.parallel.dp = world;
  cfg.parallel.tp = cfg.parallel.pp = 1;
  cfg.parallel.zero_stage = 0;
  cfg.parallel.sharding_strategy = ShardingStrategy::kFromZeroStage;
  cfg.parallel.shard_group_size = 0;
  cfg.parallel.activation_checkpointing = kiri::ActivationCheckpointing::kNone;
  cfg.parallel.microbatches = 1;
  cfg.parallel.virtual_stages = 1;
  cfg.parallel.schedule = PipelineSchedule::k1F1B;
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
  const std::vector<plan::Evaluation> fits = fitting_layouts(cfg, world, limit, &rec, hosts);
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
  const plan::ClusterSpec cluster = plan_cluster(limit, world, hosts);
  if (hosts.hosts > 1)
    log::info("auto layout: ", hosts.hosts, " hosts",
              hosts.ranks_per_host > 0 ? str(" x ", hosts.ranks_per_host, " ranks")
                                       : std::string(" of unequal ranks (planned as one)"),
              "; the link between hosts measured at ", mib(hosts.bandwidth), "/s and ",
              hosts.latency * 1e6, " us (all-reduces of the hosts' first ranks)");
  log::info("auto layout: ", e.layout.str(), " on ", world,
            " rank(s): ", mib(e.memory.memory.total()), " of 85% of ", mib(limit), " per rank (",
            limit_from, "), modelled step ", e.time.step_s, " s",
            offload_note(plan_model(cfg), cluster, e), "; ", fits.size(), " of the ",
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

namespace {

// micro_batch x microbatches x grad_accum x dp = G exactly: train.grad_accum, with the
// largest train.micro_batch up to the config's that divides G; the change in words ("" when
// none is exact, and then cfg is unchanged).
std::string fit_exactly(kiri::RunConfig& cfg, int64_t global_batch, int64_t m, int64_t dp) {
  const int64_t b = cfg.train.micro_batch;
  for (int64_t mb = b; mb >= 1; --mb)
    if (global_batch % (mb * m * dp) == 0) {
      cfg.train.micro_batch = mb;
      cfg.train.grad_accum = global_batch / (mb * m * dp);
      return str("train.grad_accum = ", cfg.train.grad_accum,
                 mb != b ? str(", train.micro_batch = ", mb, " (was ", b, ")") : std::string(),
                 " on dp ", dp);
    }
  return "";
}

}  // namespace

std::string fit_global_batch(kiri::RunConfig& cfg, int64_t global_batch, int world) {
  kiri::RunConfig resolved = cfg;
  kiri::resolve(resolved, {.world = world});  // dp inferred from the world (names a bad one)
  const kiri::Layout& layout = resolved.parallel;
  const int64_t m = layout.microbatches, dp = layout.dp, b = cfg.train.micro_batch;
  const int64_t before = b * m * cfg.train.grad_accum * dp;
  if (before == global_batch) return "";
  if (const std::string change = fit_exactly(cfg, global_batch, m, dp); !change.empty())
    return str("--global-batch ", global_batch, ": ", change, " (the global batch was ", before,
               " sequences)");
  const int64_t per = b * m * dp;
  cfg.train.grad_accum = std::max<int64_t>(1, (global_batch + per / 2) / per);
  return str("--global-batch ", global_batch, " cannot be kept on dp ", dp, ": micro_batch ", b,
             " x microbatches ", m, " x dp ", dp, " = ", per,
             " sequences per accumulation step, and no smaller micro_batch divides it; "
             "train.grad_accum = ",
             cfg.train.grad_accum, ", so the global batch is ", per * cfg.train.grad_accum,
             " sequences (learning rates scale with it as train.lr_scaling says)");
}

std::string keep_checkpoint_batch(kiri::RunConfig& cfg, int64_t global_batch, int world,
                                  const std::string& checkpoint) {
  kiri::RunConfig resolved = cfg;
  kiri::resolve(resolved, {.world = world});
  const kiri::Layout& layout = resolved.parallel;
  const int64_t m = layout.microbatches, dp = layout.dp, b = cfg.train.micro_batch;
  const int64_t accum = cfg.train.grad_accum, before = b * m * accum * dp;
  if (before == global_batch) return "";
  if (const std::string change = fit_exactly(cfg, global_batch, m, dp); !change.empty())
    return str("--resume: the checkpoint's global batch of ", global_batch, " sequences kept on ",
               world, " rank(s): ", change, " (train.grad_accum was ", accum, ": ", before,
               " sequences per step otherwise)");
  const int64_t per = b * m * dp;
  const int64_t lower = std::max<int64_t>(1, global_batch / per) * per;
  KIRI_RAISE(kConfig, "--resume ", checkpoint, ": the checkpoint trained with a global batch of ",
             global_batch, " sequences, which ", world, " rank(s) cannot keep: train.micro_batch ",
             b, " x parallel.microbatches ", m, " x dp ", dp, " = ", per,
             " sequences per accumulation step, and for no train.micro_batch up to ", b,
             " does micro_batch x microbatches x dp divide ", global_batch,
             "; give --global-batch ", lower, " (or ", lower + per,
             ") to continue with another global batch, or resume on a "
             "world whose dp divides ",
             global_batch);
}

void plan_for_global_batch(kiri::RunConfig& cfg, int64_t global_batch, int world) {
  cfg.parallel.microbatches = 1;
  const int64_t per = cfg.train.micro_batch * world;
  cfg.train.grad_accum = std::max<int64_t>(1, (global_batch + per / 2) / per);
}

// kiri train --dry-run: the checks a run makes before its first step (the config, the
// layout against this job's world, --auto's choice), then the resolved config and a layout
// line from rank 0, without building the model or starting MPI.
int dry_run(kiri::RunConfig cfg, bool auto_layout, const std::optional<std::string>& mem_limit,
            std::optional<int64_t> global_batch, const std::string& resumed_from) {
  const int world = launch::job_size(), rank = std::max(0, launch::job_rank());
  if (auto_layout) {
    if (global_batch) plan_for_global_batch(cfg, *global_batch, world);
    choose_layout(cfg, world, rank, mem_limit);
  }
  if (global_batch)
    if (const std::string note =
            resumed_from.empty() ? fit_global_batch(cfg, *global_batch, world)
                                 : keep_checkpoint_batch(cfg, *global_batch, world, resumed_from);
        !note.empty() && rank == 0)
      std::printf("%s\n", note.c_str());
  if (auto_layout || global_batch) validate(cfg);
  const std::optional<std::string> inferred = kiri::resolve(cfg, {.world = world}).layout;
  kiri::check_layout(cfg, world);
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

}  // namespace kiri::cli
