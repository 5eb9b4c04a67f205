#pragma once
// The layout benchmark behind `kiri bench --zero` and `kiri bench --dtypes`:
// full training steps of one model under several parallel layouts (ZeRO
// stages, prefetch, dtype, activation checkpointing), compared with the first
// layout. The layouts run interleaved, round by round, so that the noise of a
// shared machine (other jobs starting and stopping) falls on all of them
// alike instead of on whichever ran during the busy minute.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/model/parallelize.h"
#include "kiri/train/bench.h"

namespace kiri::train {

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
// steps each (train::time_parallel_steps, every rank of world a dp rank) in
// round-robin order. Collective: every rank calls it with the same arguments.
std::vector<LayoutBenchResult> run_layout_bench(
    comm::Communicator& world, const BenchSpec& spec,
    const std::vector<std::pair<std::string, model::ParallelOptions>>& layouts, int rounds);

}  // namespace kiri::train
