#pragma once
// The fastest of repeated timed calls: how kiri measures a rate of the machine (the GEMM
// rate, the calibration's kernels).
#include <algorithm>

#include "kiri/base/timer.h"

namespace kiri {

// The fastest of `reps` timed calls of f after one untimed warm-up call, in seconds.
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {
    Timer t;
    f();
    if (rep > 0) best = std::min(best, t.seconds());
  }
  return best;
}

}  // namespace kiri
