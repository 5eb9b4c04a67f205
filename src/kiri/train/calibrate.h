#pragma once
// The measurements behind `kiri plan --calibrate` (docs/planner.md, "Calibration"): this
// machine's fp32 GEMM rate per process and its intra-node link, as plain numbers (the planner
// stores and fits them: src/kiri/plan/calibration.h).
#include <cstdint>
#include <vector>

#include "kiri/comm/communicator.h"

namespace kiri::train {

// FLOP/s of an n x n x n fp32 GEMM (oneDNN sgemm) on `threads` OpenMP threads: the best of
// `reps` after a warm-up.
double measure_gemm_flops(int64_t n, int threads, int reps = 5);

struct TimedSize {
  double bytes = 0;
  double seconds = 0;  // median
};
// kiri's all_reduce (sum, fp32) of each size over `world`, median of `reps` after a warm-up;
// every rank calls it (a collective). The times are rank 0's.
std::vector<TimedSize> measure_all_reduce(comm::Communicator& world,
                                          const std::vector<int64_t>& sizes, int reps = 20);
// memcpy of each size between two buffers of this process, median of `reps` after a warm-up:
// the shared-memory copy an intra-node message costs.
std::vector<TimedSize> measure_memcpy(const std::vector<int64_t>& sizes, int reps = 20);

}  // namespace kiri::train
