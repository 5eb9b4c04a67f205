#pragma once
// The data-parallel benchmark behind `kiri bench --ddp` (run on N ranks by
// `kiri launch -n N -- bench --ddp`): tokens/s of full DDP steps, how much of
// the all-reduce time backward hides, and a naive data-parallel baseline
// (every gradient reduced to rank 0, then broadcast) beside it.
#include <string>

#include <array>
#include <vector>

#include "kiri/bench/bench.h"
#include "kiri/comm/communicator.h"
#include "kiri/model/parallelize.h"

namespace kiri::bench {

struct DdpBenchResult {
  int ranks = 1;
  double step_s = 0;           // DDP: forward, backward with overlapped all-reduce, AdamW
  double tokens_per_s = 0;     // global tokens of a step / step_s
  double backward_s = 0;       // backward alone, no communication
  double backward_sync_s = 0;  // backward + finalize_grads under DDP
  double allreduce_s = 0;      // the same reductions alone, nothing to overlap
  double hidden_fraction = 0;  // 1 - (backward_sync_s - backward_s) / allreduce_s
  double naive_step_s = 0;     // reduce-to-root + broadcast per parameter after backward
  double naive_tokens_per_s = 0;
};

DdpBenchResult run_ddp_bench(comm::Communicator& world, const BenchSpec& spec);

// Full training steps (forward, backward with the layout's reductions, AdamW,
// the layout's parameter gathers) of spec's model on every rank of world as
// dp ranks, laid out by `options` (any ZeRO stage, dtype, checkpointing).
struct ParallelStepTimes {
  std::vector<double> step_s, backward_s;  // after the warm-up steps
  MemoryStats peak;                        // this rank's allocator at the end
  // Bytes the last step sent per operation kind, as the dp communicator books
  // them when each operation starts (so nothing still in flight is missed).
  std::array<int64_t, comm::kNumOpKinds> last_step_sent{};
};
ParallelStepTimes time_parallel_steps(comm::Communicator& world, const BenchSpec& spec,
                                      const model::ParallelOptions& options);

}  // namespace kiri::bench
