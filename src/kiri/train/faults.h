#pragma once
// Failure injection for the tests of failure handling, read from KIRI_FAULT (one fault per
// process, KIND:RANK:N):
//   inf:R:S       rank R's loss times +inf in step S (1-based, as printed): an fp16 overflow
//   nan:R:S       times NaN in step S and every step after: a run that diverged
//   kill:R:S      rank R dies by SIGKILL before step S
//   hang:R:S      rank R stops communicating before step S, as a rank stuck in a loop would
//   raise:R:S     rank R raises a kData error before step S, as a bad read on one rank would
//   stopwait:R:S  rank R waits before step S until a stop signal arrives (at most 120 s), so
//                 that a test's signal lands at that boundary however loaded the machine is
//   slowsave:R:MS rank R's asynchronous checkpoint writer sleeps MS ms before each file, so
//                 that a test's kill lands inside a save
//   fsync:R:N     rank R dies by SIGKILL just before its Nth fsync (1-based, any thread; the
//                 crash points of a save; implemented in base/atomic_file.cpp)
//   datakill:0:N  `kiri data` dies by SIGKILL at point N of its rewrite (data/staged_dir.h,
//                 data_fault_point: the data layer reads this kind itself)
#include <cstdint>

namespace kiri::train {

// The factor of rank R's loss in step `step_index` (0-based): inf, NaN or 1.
double fault_scale_for(int rank, int64_t step_index);
// Before step `step` (0-based): kill, hang, raise or wait for a stop signal, when KIRI_FAULT says
// so.
void inject_fault(int rank, int64_t step);
// slowsave's milliseconds for this rank (0: none).
int slow_save_ms_for(int rank);

}  // namespace kiri::train
