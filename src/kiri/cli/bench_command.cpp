#include <cstdio>
#include <iostream>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/world.h"
#include "kiri/train/bench.h"
#include "kiri/train/ddp_bench.h"

namespace kiri::cli {

// kiri bench: one JSON line per (config, threads) with tokens/s, MFU and the
// step time against its GEMMs' time (bench/run.sh puts PyTorch beside it).
namespace {
// kiri launch -n N -- bench --ddp: one JSON line from rank 0.
int ddp_bench(const Args& a) {
  World world = make_world();
  comm::Options o = world.comm->options();
  o.check_collectives = !a.flag("no-check");
  world.comm->set_options(o);
  train::BenchSpec spec = train::bench_preset(a.get("config").value_or("tiny"));
  spec.steps = static_cast<int>(a.get_int("steps", spec.steps));
  spec.warmup_steps = static_cast<int>(a.get_int("warmup", spec.warmup_steps));
  train::DdpBenchResult r = train::run_ddp_bench(*world.comm, spec);
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
}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  Args a(argv, {"config", "threads", "steps", "warmup"}, {"ddp", "no-check"},
         {"config", "threads"});
  if (a.flag("ddp")) return ddp_bench(a);
  std::vector<std::string> configs = a.all("config");
  if (configs.empty()) configs = {"tiny", "gpt2-124M"};
  std::vector<std::string> threads = a.all("threads");
  if (threads.empty()) threads = {"1", "2"};
  for (const std::string& name : configs) {
    for (const std::string& th : threads) {
      train::BenchSpec spec = train::bench_preset(name);
      spec.threads = std::stoi(th);
      spec.steps = static_cast<int>(a.get_int("steps", spec.steps));
      spec.warmup_steps = static_cast<int>(a.get_int("warmup", spec.warmup_steps));
      train::BenchResult r = train::run_training_bench(spec);
      nlohmann::json j = {{"impl", "kiri"},
                          {"config", name},
                          {"threads", spec.threads},
                          {"batch", spec.batch},
                          {"seq_len", spec.seq},
                          {"step_s", r.step_s},
                          {"tokens_per_s", r.tokens_per_s},
                          {"gemm_step_s", r.gemm_step_s},
                          {"gemm_fraction", r.gemm_step_s / r.step_s},
                          {"peak_gflops", r.peak_flops / 1e9},
                          {"mfu", r.mfu},
                          {"params", spec.model.num_parameters()}};
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
}

}  // namespace kiri::cli
