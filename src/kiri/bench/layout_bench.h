#pragma once
// The layout benchmark behind `kiri bench --zero` and `kiri bench --dtypes`:
// full training steps of one model under several parallel layouts (ZeRO
// stages, prefetch, dtype, activation checkpointing), compared with the first
// layout. The layouts run interleaved, round by round, so that the noise of a
// shared machine (other jobs starting and stopping) falls on all of them
// alike instead of on whichever ran during the busy minute.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiri/bench/bench.h"
#include "kiri/comm/communicator.h"
#include "kiri/model/parallelize.h"

namespace kiri::bench {

struct LayoutBenchResult {
  std::string name;
  model::ParallelOptions options;
  int timed_steps = 0;      // pooled over the rounds
  double step_s = 0;        // median of the pooled steps
  double tokens_per_s = 0;  // batch * seq * world size / step_s
  double ratio = 1;         // step_s / the first layout's step_s
  // This rank's allocator peak per category (the largest over the rounds).
  std::array<int64_t, kNumCategories> peak_bytes{};
  // ... and of all categories together (not the sum of the above: the
  // categories peak at different moments of a step).
  int64_t peak_total = 0;
  // Bytes this rank sent per step, per operation kind and in total, counted
  // by the dp communicator over one untimed step (0 on a single process).
  std::array<int64_t, comm::kNumOpKinds> sent_bytes{};
  int64_t sent_bytes_total = 0;
};

// Runs every layout for `rounds` rounds of spec.warmup_steps + spec.steps
// steps each (bench::time_parallel_steps, every rank of world a dp rank) in
// round-robin order. Collective: every rank calls it with the same arguments.
std::vector<LayoutBenchResult> run_layout_bench(
    comm::Communicator& world, const BenchSpec& spec,
    const std::vector<std::pair<std::string, model::ParallelOptions>>& layouts, int rounds);

// The mesh-layout benchmark behind `kiri bench --layouts`: full training
// steps of one model under dp x tp x pp layouts of the world (tensor and
// pipeline parallelism, each schedule and number of micro-batches), the
// layouts interleaved round by round as above. Each layout's step feeds
// micro_batch x m rows per dp rank (m = options.pipeline.microbatches) to
// ParallelGPT::forward_backward, so the global batch is
// dp x micro_batch x m sequences of spec.seq tokens.
struct MeshLayout {
  std::string name;
  parallel::MeshShape shape;
  model::ParallelOptions options;  // options.pipeline: schedule and m
  int64_t micro_batch = 8;         // rows of one micro-batch on one dp rank
  int64_t vocab_size = 0;          // > 0: replaces spec.model's (a balanced pipeline)
  bool sequence_parallel = false;  // Megatron's (tp > 1): the norms' rows split over tp
};

struct MeshLayoutResult {
  MeshLayout layout;
  int64_t tokens_per_step = 0;  // global: dp x micro_batch x m x seq
  int timed_steps = 0;          // pooled over the rounds
  double step_s = 0;            // median of the pooled steps (rank 0's clock)
  double tokens_per_s = 0;      // tokens_per_step / step_s
  // pp > 1: rank 0's (stage 0's) measured bubble over all timed steps
  // (model::PipelineStats: 1 - compute / window of Pipeline::run()), and
  // the formula (pp - 1) / (m + pp - 1). -1 without a pipeline.
  double bubble = -1, bubble_formula = -1;
  // pp > 1: each stage's compute time per step (inside Pipeline::run()'s
  // forwards and backwards; median over the rounds' means, from the stage's
  // first rank), and the bubble stage 0 would see with these unequal stage
  // costs C_s and the schedule's fill and drain:
  //   1 - C_0 / ((sum_s C_s - max_s C_s) / m + max_s C_s)
  // (with equal C_s it is the formula above; communication not counted).
  std::vector<double> stage_compute_s;
  double bubble_unequal = -1;
  // From rank 0's trace (a base/trace.h Tracer on the world and the mesh's
  // groups, enabled during the timed steps only), over the timed steps'
  // windows (barrier to barrier: zero_grad, forward_backward, optimizer):
  // Tracer::busy()'s split into compute, communication not under compute,
  // and idle, as shares of the steps' time ...
  double compute_share = 0, exposed_comm_share = 0, idle_share = 0;
  // ... and per operation name ("all_reduce", "send", "recv", ...; and per
  // "name group", e.g. "all_reduce tp") the time covered by that name's
  // comm-lane spans (call to completion seen, overlaps within a name
  // counted once), as a share of the steps' time. A blocking operation's
  // span is time the rank spent in it; an asynchronous one's (DDP's
  // bucketed all-reduce) may run under compute.
  std::map<std::string, double> comm_share_by_op, comm_share_by_group;
  int64_t peak_total = 0;  // rank 0's allocator peak, all categories (largest over rounds)
  std::array<int64_t, kNumCategories> peak_bytes{};  // ... and per category
};

// Runs every layout for `rounds` rounds of spec.warmup_steps + spec.steps
// steps (spec.batch is not used: micro_batch and m give the rows).
// Collective: every rank calls it with the same arguments; every layout's
// shape must multiply to world.size(). Results are rank 0's.
std::vector<MeshLayoutResult> run_mesh_layout_bench(comm::Communicator& world,
                                                    const BenchSpec& spec,
                                                    const std::vector<MeshLayout>& layouts,
                                                    int rounds);

}  // namespace kiri::bench
