#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/stats.h"
#include "kiri/bench/bench.h"
#include "kiri/bench/ddp_bench.h"
#include "kiri/bench/layout_bench.h"
#include "kiri/bench/step_gemms.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/verbs.h"
#include "kiri/kernels/ops.h"
#include "kiri/kernels/peak.h"
#include "kiri/launch/world.h"
#include "kiri/parallel/pp/partition.h"
#include "kiri/parallel/pp/schedule.h"
#include "kiri/train/gemm_choice.h"
#include "kiri/train/metrics.h"

namespace kiri::cli {

// kiri bench: one JSON line per (config, threads) with tokens/s, MFU against the peak of the
// step's dtype (--dtype, fp32 by default) and the step time against its GEMMs' time
// (benchmarks/run.sh puts PyTorch beside it).
// --ddp, --zero, --dtypes, --layouts and --activations select the data-parallel and layout
// benchmarks.
namespace {
// kiri launch -n N -- bench --ddp: one JSON line from rank 0.
int ddp_bench(const Args& a) {
  launch::World world = launch::make_world();
  comm::Options o = world.comm->options();
  o.check_collectives = !a.flag("no-check");
  world.comm->set_options(o);
  bench::BenchSpec spec = bench::bench_preset(a.get("config").value_or("tiny"));
  spec.steps = static_cast<int>(a.get_int("steps", spec.steps));
  spec.warmup_steps = static_cast<int>(a.get_int("warmup", spec.warmup_steps));
  bench::DdpBenchResult r = bench::run_ddp_bench(*world.comm, spec);
  if (world.comm->rank() == 0) {
    nlohmann::json j = {{"impl", "kiri-ddp"},
                        {"config", spec.name},
                        {"ranks", r.ranks},
                        {"threads", omp_get_max_threads()},
                        {"step_s", r.step_s},
                        {"tokens_per_s", r.tokens_per_s},
                        {"backward_s", r.backward_s},
                        {"backward_sync_s", r.backward_sync_s},
                        {"allreduce_s", r.allreduce_s},
                        {"hidden_fraction", r.hidden_fraction},
                        {"naive_step_s", r.naive_step_s},
                        {"naive_tokens_per_s", r.naive_tokens_per_s},
                        {"check_collectives", o.check_collectives}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

using Layouts = std::vector<std::pair<std::string, model::ParallelOptions>>;

// Which GEMM path a 16-bit row ran (KIRI_GEMM_LOWP forces one) and the measured rates kAuto
// chose by (one pass over the bench's GEMM shapes).
void add_gemm_lowp(nlohmann::json& j, DType dt) {
  j["gemm_lowp"] = kernels::gemm_lowp_path_description(dt);
  const train::LowpPassRates p = train::pass_rates(kernels::gemm_lowp_rates(dt));
  j["gemm_lowp_gflops"] = {{"via_f32", p.via_f32 / 1e9},
                           {"onednn", p.onednn / 1e9},
                           {"packed", p.packed / 1e9},
                           {"chosen", p.chosen / 1e9}};
}

// One JSON line per layout, from rank 0: step time, tokens/s, the ratio to
// the first layout ("vs_<first>"), this rank's peak bytes per category and,
// on more than one rank, the bytes it sent per step.
// MFU is this rank's share of the model FLOPs over the peak of the row's dtype on its threads
// (kernels::peak_flops; peak_instruction names what reached it). gemm_s, where given, holds the
// step's GEMMs replayed alone per dtype: the row's step_over_gemms.
void print_layouts(const std::string& impl, const bench::BenchSpec& spec, int ranks, int rounds,
                   const std::vector<bench::LayoutBenchResult>& results,
                   const std::map<DType, double>& gemm_s = {}) {
  const std::string vs = "vs_" + results.front().name;
  const int threads = omp_get_max_threads();
  for (const bench::LayoutBenchResult& r : results) {
    const DType dt = r.options.dtype;
    const double model_flops_per_s =
        spec.model.flops_per_token(spec.seq) * r.tokens_per_s / double(ranks);
    nlohmann::json mem;
    for (int c = 0; c < kNumCategories; ++c)
      if (static_cast<Category>(c) != Category::kOther)
        mem[category_name(static_cast<Category>(c))] = r.peak_bytes[c];
    mem["total"] = r.peak_total;
    nlohmann::json j = {{"impl", impl},
                        {"config", spec.name},
                        {"layout", r.name},
                        {"ranks", ranks},
                        {"threads", omp_get_max_threads()},
                        {"zero_stage", r.options.zero_stage},
                        {"prefetch", r.options.prefetch},
                        {"dtype", dtype_name(r.options.dtype)},
                        {"checkpoint_every", r.options.checkpoint_every},
                        {"rounds", rounds},
                        {"timed_steps", r.timed_steps},
                        {"step_s", r.step_s},
                        {"tokens_per_s", r.tokens_per_s},
                        {vs, r.ratio},
                        {"mfu", train::model_flops_utilization(model_flops_per_s,
                                                               kernels::peak_flops(dt, threads))},
                        {"peak_gflops", kernels::peak_flops(dt, threads) / 1e9},
                        {"peak_instruction", kernels::core_peak(dt).instruction},
                        {"mem", mem}};
    // Checkpointed rows recompute their forward: their step over the same GEMMs is larger.
    if (const auto g = gemm_s.find(dt); g != gemm_s.end()) {
      j["gemm_step_s"] = g->second;
      j["step_over_gemms"] = r.step_s / g->second;
    }
    if (dt != DType::kF32) add_gemm_lowp(j, dt);
    if (ranks > 1) {
      nlohmann::json sent;
      for (int k = 0; k < comm::kNumOpKinds; ++k)
        if (r.sent_bytes[k] > 0)
          sent[comm::op_kind_name(static_cast<comm::OpKind>(k))] = r.sent_bytes[k];
      j["sent_bytes_per_step"] = r.sent_bytes_total;
      j["sent_by_op"] = sent;
    }
    std::cout << j.dump() << std::endl;
  }
}

bench::BenchSpec layout_spec(const Args& a, int default_steps) {
  bench::BenchSpec spec = bench::bench_preset(a.get("config").value_or("tiny"));
  spec.steps = static_cast<int>(a.get_int("steps", default_steps));
  spec.warmup_steps = static_cast<int>(a.get_int("warmup", spec.warmup_steps));
  return spec;
}

// kiri launch -n N -- bench --zero: ZeRO stages 0-3 (and stage 3 without
// prefetch), all fp32, on every rank as dp ranks, compared with stage 0.
int zero_bench(const Args& a) {
  launch::World world = launch::make_world();
  comm::Options o = world.comm->options();
  o.check_collectives = !a.flag("no-check");
  world.comm->set_options(o);
  const bench::BenchSpec spec = layout_spec(a, 3);
  const int rounds = static_cast<int>(a.get_int("rounds", 3));
  Layouts layouts;
  for (int stage = 0; stage <= 3; ++stage) {
    model::ParallelOptions layout;
    layout.zero_stage = stage;
    layouts.push_back({"stage" + std::to_string(stage), layout});
  }
  model::ParallelOptions no_prefetch;
  no_prefetch.zero_stage = 3;
  no_prefetch.prefetch = false;
  layouts.push_back({"stage3-noprefetch", no_prefetch});
  auto results = bench::run_layout_bench(*world.comm, spec, layouts, rounds);
  if (world.comm->rank() == 0)
    print_layouts("kiri-zero", spec, world.comm->size(), rounds, results);
  return 0;
}

// kiri bench --dtypes: one process, stage 0, fp32 against bf16 and fp16
// (mixed precision: 16-bit parameters and gradients, fp32 master weights and
// activations) and against fp32 with every block's activations checkpointed.
int dtype_bench(const Args& a) {
  launch::World world = launch::make_world();
  bench::BenchSpec spec = layout_spec(a, 3);
  spec.threads = static_cast<int>(a.get_int("threads", 1));
  omp_set_num_threads(spec.threads);
  const int rounds = static_cast<int>(a.get_int("rounds", 3));
  Layouts layouts;
  for (auto [name, dtype] : {std::pair<const char*, DType>{"fp32", DType::kF32},
                             {"bf16", DType::kBF16},
                             {"fp16", DType::kF16}}) {
    model::ParallelOptions layout;
    layout.dtype = dtype;
    layouts.push_back({name, layout});
  }
  model::ParallelOptions ckpt;
  ckpt.checkpoint_every = 1;
  layouts.push_back({"fp32-ckpt", ckpt});
  auto results = bench::run_layout_bench(*world.comm, spec, layouts, rounds);
  // Each dtype's GEMMs alone, on the 16-bit paths run_layout_bench chose: the median of one
  // replay per round (each about what a step's GEMMs cost). No warm-up replay: the steps ran
  // these shapes on these paths (oneDNN's primitives are cached), and filling the operands
  // touched their pages.
  std::map<DType, double> gemm_s;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    bench::StepGemmReplay replay(spec.model, spec.batch, spec.seq, dt);
    std::vector<double> times;
    for (int i = 0; i < rounds; ++i) times.push_back(replay.run());
    gemm_s[dt] = median(times);
  }
  if (world.comm->rank() == 0)
    print_layouts("kiri-dtype", spec, world.comm->size(), rounds, results, gemm_s);
  return 0;
}
// kiri bench --layouts: on one process the 1x1x1 layout (at --threads, default
// 1); on N ranks (kiri launch -n N --threads 1 -- bench --layouts) dp N, tp N
// and pp N with GPipe and 1F1B at m = 1, 2, 4, 8. The global batch is 8
// sequences of the config's length in every layout: dp N takes 8/N rows per
// rank, pp N micro-batches of 8/m rows. Then 1F1B again with the vocabulary
// cut to 512 tokens (stages of about equal cost; not comparable in tokens/s).
// One JSON line per layout from rank 0.
// The layouts kiri bench --layouts times on n ranks: one process, dp n, tp n, and pp n under
// both schedules at 1-8 micro-batches, then with a vocabulary small enough for equal stages.
std::vector<bench::MeshLayout> bench_layouts(int n, int64_t global_rows) {
  if (n == 1) return {{"1x1x1", {1, 1, 1}, {}, global_rows}};
  KIRI_CHECK_KIND(kConfig, global_rows % n == 0, "bench --layouts: ", n,
                  " ranks do not divide the global batch of ", global_rows, " sequences");
  std::vector<bench::MeshLayout> layouts;
  layouts.push_back({"dp" + std::to_string(n), {n, 1, 1}, {}, global_rows / n});
  layouts.push_back({"tp" + std::to_string(n), {1, n, 1}, {}, global_rows});
  for (auto kind : {kiri::PipelineSchedule::k1F1B, kiri::PipelineSchedule::kGpipe})
    for (int m : {1, 2, 4, 8}) {
      model::ParallelOptions po;
      po.pipeline.schedule = kind;
      po.pipeline.microbatches = m;
      layouts.push_back(
          {"pp" + std::to_string(n) + "-" + kiri::name(kind) + "-m" + std::to_string(m),
           {1, 1, n},
           po,
           global_rows / m});
    }
  // The same pipeline with a 512-token vocabulary, whose LM head no longer
  // outweighs the blocks: stages of about equal cost, the formula's case.
  for (int m : {1, 2, 4, 8}) {
    model::ParallelOptions po;
    po.pipeline.microbatches = m;
    layouts.push_back({"pp" + std::to_string(n) + "-1f1b-m" + std::to_string(m) + "-vocab512",
                       {1, 1, n},
                       po,
                       global_rows / m,
                       512});
  }
  return layouts;
}

double rounded4(double v) {
  return std::round(v * 1e4) / 1e4;
}

// The pipeline's columns of one result row: the measured bubble against the formula's, and
// the stages the partition chose with their share of the FLOPs per token.
void add_pipeline_columns(nlohmann::json& j, const bench::BenchSpec& spec,
                          const bench::MeshLayoutResult& r) {
  const bench::MeshLayout& l = r.layout;
  j["bubble"] = rounded4(r.bubble);
  j["bubble_formula"] = rounded4(r.bubble_formula);
  j["bubble_unequal_stages"] = rounded4(r.bubble_unequal);
  j["stage_compute_s"] = r.stage_compute_s;
  namespace pp = parallel::pp;
  const auto costs =
      pp::gpt_layer_costs(static_cast<int>(spec.model.n_embd), static_cast<int>(spec.model.n_head),
                          static_cast<int>(l.vocab_size > 0 ? l.vocab_size : spec.model.vocab_size),
                          static_cast<int>(spec.seq));
  const auto parts = pp::partition_layers(static_cast<int>(spec.model.n_layer), l.shape.pp, costs);
  j["stages"] = pp::describe(parts);
  std::vector<double> share = pp::stage_costs(parts, costs);
  double total = 0;
  for (double c : share) total += c;
  for (double& c : share) c = rounded4(c / total);
  j["stage_flops_share"] = share;  // what the partition balanced: FLOPs per token
}

// One JSON row of kiri bench --layouts.
nlohmann::json layout_row(const bench::BenchSpec& spec, const bench::MeshLayoutResult& r, int ranks,
                          int rounds, bool check_collectives) {
  const bench::MeshLayout& l = r.layout;
  nlohmann::json by_op = nlohmann::json::object(), by_group = nlohmann::json::object();
  for (const auto& [k, v] : r.comm_share_by_op) by_op[k] = rounded4(v);
  for (const auto& [k, v] : r.comm_share_by_group) by_group[k] = rounded4(v);
  nlohmann::json j = {
      {"impl", "kiri-layout"},
      {"config", spec.name},
      {"layout", l.name},
      {"ranks", ranks},
      {"threads", omp_get_max_threads()},
      {"dp", l.shape.dp},
      {"tp", l.shape.tp},
      {"pp", l.shape.pp},
      {"schedule", l.shape.pp > 1 ? kiri::name(l.options.pipeline.schedule) : "none"},
      {"microbatches", l.options.pipeline.microbatches},
      {"micro_batch", l.micro_batch},
      {"vocab_size", l.vocab_size > 0 ? l.vocab_size : spec.model.vocab_size},
      {"seq_len", spec.seq},
      {"tokens_per_step", r.tokens_per_step},
      {"rounds", rounds},
      {"timed_steps", r.timed_steps},
      {"step_s", r.step_s},
      {"tokens_per_s", r.tokens_per_s},
      {"compute_share", rounded4(r.compute_share)},
      {"exposed_comm_share", rounded4(r.exposed_comm_share)},
      {"idle_share", rounded4(r.idle_share)},
      {"comm_share", by_op},
      {"comm_share_by_group", by_group},
      {"peak_mib", double(r.peak_total) / (1 << 20)},
      {"check_collectives", check_collectives}};
  if (r.bubble >= 0) add_pipeline_columns(j, spec, r);
  return j;
}

int mesh_layout_bench(const Args& a) {
  launch::World world = launch::make_world();
  comm::Options o = world.comm->options();
  o.check_collectives = !a.flag("no-check");
  world.comm->set_options(o);
  const bench::BenchSpec spec = layout_spec(a, 5);
  const int rounds = static_cast<int>(a.get_int("rounds", 3));
  const int n = world.comm->size();
  if (n == 1) omp_set_num_threads(static_cast<int>(a.get_int("threads", 1)));
  std::vector<bench::MeshLayout> layouts = bench_layouts(n, 8);
  if (const auto only = a.get("only")) {  // --only NAME: that layout alone
    std::erase_if(layouts, [&](const bench::MeshLayout& l) { return l.name != *only; });
    KIRI_CHECK_KIND(kConfig, !layouts.empty(), "bench --layouts: no layout named ", *only);
  }
  auto results = bench::run_mesh_layout_bench(*world.comm, spec, layouts, rounds);
  if (world.comm->rank() != 0) return 0;
  for (const bench::MeshLayoutResult& r : results)
    std::cout << layout_row(spec, r, n, rounds, o.check_collectives).dump() << std::endl;
  return 0;
}

// kiri launch -n N --threads 1 -- bench --activations: tensor parallelism over the N ranks
// (tp N, micro-batch = the config's batch), plain against sequence parallelism, selective
// recomputation (Megatron's default core_attn, and every module) and full recomputation.
// One JSON line per layout from rank 0: step time, its ratio to plain tp, and rank 0's
// allocator peak of activations and of everything (benchmarks/activations.sh puts the planner's
// predictions beside them).
int activation_bench(const Args& a) {
  launch::World world = launch::make_world();
  comm::Options o = world.comm->options();
  o.check_collectives = !a.flag("no-check");
  world.comm->set_options(o);
  const bench::BenchSpec spec = layout_spec(a, 5);
  const int rounds = static_cast<int>(a.get_int("rounds", 3));
  const int n = world.comm->size();
  KIRI_CHECK_KIND(kConfig, n > 1, "bench --activations: tensor parallelism needs 2 or more ranks ",
                  "(kiri launch -n 2 --threads 1 -- bench --activations), got ", n);
  const std::string tp = "tp" + std::to_string(n);
  model::SelectiveRecompute core, all;
  core.core_attn = all.core_attn = all.layernorm = all.mlp_act = true;
  model::ParallelOptions none, sel_core, sel_all, full;
  sel_core.selective = core;
  sel_all.selective = all;
  full.checkpoint_every = 1;
  std::vector<bench::MeshLayout> layouts;
  auto add = [&](const std::string& suffix, const model::ParallelOptions& po, bool sp) {
    bench::MeshLayout l{tp + suffix, {1, n, 1}, po, spec.batch};
    l.sequence_parallel = sp;
    layouts.push_back(l);
  };
  add("", none, false);
  add("-sp", none, true);
  add("-selective", sel_core, false);
  add("-selective-all", sel_all, false);
  add("-sp-selective-all", sel_all, true);
  add("-full", full, false);
  add("-sp-full", full, true);
  if (const auto only = a.get("only")) {
    std::erase_if(layouts, [&](const bench::MeshLayout& l) { return l.name != *only; });
    KIRI_CHECK_KIND(kConfig, !layouts.empty(), "bench --activations: no layout named ", *only);
  }
  auto results = bench::run_mesh_layout_bench(*world.comm, spec, layouts, rounds);
  if (world.comm->rank() != 0) return 0;
  const double first = results.front().step_s;
  for (const bench::MeshLayoutResult& r : results) {
    const bench::MeshLayout& l = r.layout;
    const model::SelectiveRecompute& sr = l.options.selective;
    std::vector<std::string> modules;
    if (sr.core_attn) modules.push_back("core_attn");
    if (sr.layernorm) modules.push_back("layernorm");
    if (sr.mlp_act) modules.push_back("mlp_act");
    const char* recompute = l.options.checkpoint_every > 0 ? "full"
                            : sr.any()                     ? "selective"
                                                           : "none";
    nlohmann::json j = {
        {"impl", "kiri-activations"},
        {"config", spec.name},
        {"layout", l.name},
        {"ranks", n},
        {"threads", omp_get_max_threads()},
        {"tp", l.shape.tp},
        {"sequence_parallel", l.sequence_parallel},
        {"activation_checkpointing", recompute},
        {"recompute_modules", modules},
        {"micro_batch", l.micro_batch},
        {"seq_len", spec.seq},
        {"rounds", rounds},
        {"timed_steps", r.timed_steps},
        {"step_s", r.step_s},
        {"vs_" + results.front().layout.name, r.step_s / first},
        {"activations_peak_bytes", r.peak_bytes[static_cast<int>(Category::kActivations)]},
        {"peak_bytes", r.peak_total},
        {"check_collectives", o.check_collectives}};
    std::cout << j.dump() << std::endl;
  }
  return 0;
}
}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("bench"));
  if (a.flag("ddp")) return ddp_bench(a);
  if (a.flag("zero")) return zero_bench(a);
  if (a.flag("dtypes")) return dtype_bench(a);
  if (a.flag("layouts")) return mesh_layout_bench(a);
  if (a.flag("activations")) return activation_bench(a);
  std::vector<std::string> configs = a.all("config");
  if (configs.empty()) configs = {"tiny", "gpt2-124M"};
  std::vector<std::string> threads = a.all("threads");
  if (threads.empty()) threads = {"1", "2"};
  // Per rank (this process), FLOP/s; unset: the measured peak of --dtype (fp32: the FMA's).
  const double peak =
      a.get("peak-flops") ? train::check_peak_flops(a.get_double("peak-flops", 0)) : 0.0;
  const DType dtype = parse_dtype(a.get("dtype").value_or("fp32"));
  for (const std::string& name : configs) {
    for (const std::string& th : threads) {
      bench::BenchSpec spec = bench::bench_preset(name);
      spec.dtype = dtype;
      spec.threads = std::stoi(th);
      spec.steps = static_cast<int>(a.get_int("steps", spec.steps));
      spec.warmup_steps = static_cast<int>(a.get_int("warmup", spec.warmup_steps));
      spec.peak_flops = peak;
      bench::BenchResult r = bench::run_training_bench(spec);
      nlohmann::json j = {{"impl", "kiri"},
                          {"config", name},
                          {"dtype", dtype_name(dtype)},
                          {"threads", spec.threads},
                          {"batch", spec.batch},
                          {"seq_len", spec.seq},
                          {"step_s", r.step_s},
                          {"tokens_per_s", r.tokens_per_s},
                          {"gemm_step_s", r.gemm_step_s},
                          {"gemm_fraction", r.gemm_step_s / r.step_s},
                          {"step_over_gemms", r.step_over_gemms},
                          {"peak_gflops", r.peak_flops / 1e9},
                          {"peak_source", peak > 0 ? "given" : "measured"},
                          {"peak_instruction", r.peak_instruction},
                          {"gemm_gflops", r.gemm_flops / 1e9},
                          {"mfu", r.mfu},
                          {"mfu_gemm", r.mfu_gemm},
                          {"memory_gbps", r.memory_bandwidth / 1e9},
                          {"adamw_gbps", r.adamw_bandwidth / 1e9},
                          {"adamw_of_memory", r.adamw_bandwidth / r.memory_bandwidth},
                          {"optimizer_s", r.optimizer_s},
                          {"params", spec.model.num_parameters()}};
      if (dtype != DType::kF32) add_gemm_lowp(j, dtype);
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
}

}  // namespace kiri::cli
