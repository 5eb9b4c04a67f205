#pragma once
// The planner's view of a kiri train run: --auto's layout choice, --dry-run, and the
// advice an out-of-memory error quotes (commands.cpp's train verb uses them).
#include <optional>
#include <string>

#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/tensor/allocator.h"

namespace kiri::plan {
struct ModelSpec;
struct Layout;
}  // namespace kiri::plan

namespace kiri::cli {

// kiri's model as the planner's: GPT-2's or LLaMA's structure at the config's dimensions
// (model.vocab_size resolved).
plan::ModelSpec plan_model(const kiri::RunConfig& cfg);
// The run's layout as the planner's: m = pipeline micro-batches x accumulation steps,
// B = b·m·dp (dp resolved); every_k checkpointing counts as full recomputation.
plan::Layout plan_layout(const kiri::RunConfig& cfg);

// The allocator's out-of-memory advice: the category that overflowed and the cheapest
// layout change on the same world that the planner says fits the limit.
std::string oom_advice(const kiri::RunConfig& cfg, int world, const MemoryStats& stats,
                       Category category, int64_t bytes);
// The hosts a run spans, as train --auto plans for them: `hosts` nodes of `ranks_per_host`
// ranks (0: not the same on every host, then planned as one node), joined by a link of
// `bandwidth` bytes/s and `latency` s as measured_hosts() timed it.
struct HostLayout {
  int hosts = 1;
  int ranks_per_host = 0;
  double bandwidth = 0, latency = 0;
};
// Collective over world: which ranks share a host, and across hosts the link between them,
// timed with all-reduces among the hosts' first ranks (the same numbers on every rank).
HostLayout measure_hosts(comm::Communicator& world);

// The planner's cost of a layout whose tp or shard group spans hosts, for train's warning:
// the modelled step with every group on the measured link, and with the ranks in one host.
std::string cross_host_cost(const kiri::RunConfig& cfg, int world, const HostLayout& hosts);

// train --auto: sets cfg's layout keys to the planner's fastest layout of this world that
// fits the limit, and logs the choice (rank 0). Across hosts the planner sees them: groups
// that span hosts use the measured link.
void choose_layout(kiri::RunConfig& cfg, int world, int rank,
                   const std::optional<std::string>& mem_limit, const HostLayout& hosts = {});
// kiri train --global-batch G on a world of `world` ranks (dp resolved from it and tp x pp
// unless given): sets train.grad_accum so that micro_batch x microbatches x grad_accum x dp
// = G; when that does not divide, the largest smaller train.micro_batch that makes it exact;
// when none does, the nearest grad_accum (at least 1), and the note says the global batch
// changed. Returns a note for the log ("" when nothing changed).
std::string fit_global_batch(kiri::RunConfig& cfg, int64_t global_batch, int world);
// A resume without --global-batch: the checkpoint's global batch (state.json's) kept on
// this world by fit_global_batch's exact fits (train.grad_accum, then a smaller
// train.micro_batch); when none is exact, a kConfig error with the numbers and the
// --global-batch that continues with another. Returns a note for the log ("" when nothing
// changed).
std::string keep_checkpoint_batch(kiri::RunConfig& cfg, int64_t global_batch, int world,
                                  const std::string& checkpoint);
// --auto with --global-batch: the plain data-parallel start that choose_layout plans from
// (B = micro_batch x grad_accum x world) set to G as nearly as it goes.
void plan_for_global_batch(kiri::RunConfig& cfg, int64_t global_batch, int world);
// kiri train --dry-run: the checks before the first step, then the resolved config and
// the layout (rank 0), without building the model; returns the exit code. `resumed_from`
// (a checkpoint): global_batch is its, kept as keep_checkpoint_batch keeps it.
int dry_run(kiri::RunConfig cfg, bool auto_layout, const std::optional<std::string>& mem_limit,
            std::optional<int64_t> global_batch = std::nullopt,
            const std::string& resumed_from = "");

}  // namespace kiri::cli
