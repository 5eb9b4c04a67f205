#pragma once
// The measurements behind `kiri plan --calibrate` (docs/planner.md, "Calibration"): this
// machine's FMA peaks and fp32 GEMM rate per process and its intra-node link, as plain numbers (the
// planner stores and fits them: src/kiri/plan/calibration.h).
#include <cstdint>
#include <vector>

#include "kiri/bench/bench.h"
#include "kiri/comm/communicator.h"
#include "kiri/kernels/peak.h"

namespace kiri::bench {

// FLOP/s of an n x n x n fp32 GEMM (oneDNN sgemm) on `threads` OpenMP threads: the best of
// `reps` after a warm-up (kernels::measure_gemm_flops on that many threads).
double measure_gemm_flops(int64_t n, int threads, int reps = 5);
// The same for bf16 A and B into fp32 C through kernels::gemm_lowp, on the path training
// takes (kernels::gemm_lowp_path: oneDNN's bf16 matmul with AMX, else widened to fp32).
double measure_gemm_bf16_flops(int64_t n, int threads, int reps = 5);

// One core's FMA peak per dtype (kernels::core_peak: the measurement, cached per process,
// that kiri train's MFU uses): what `kiri plan --calibrate` stores as this machine's peaks.
struct CorePeaks {
  kernels::CorePeak fp32, bf16, fp16;
};
CorePeaks measure_core_peaks();

struct TimedSize {
  double bytes = 0;
  double seconds = 0;  // median
};
// kiri's all_reduce (sum, fp32) of each size over `world`, median of `reps` after a warm-up;
// every rank calls it (a collective). The times are rank 0's.
std::vector<TimedSize> measure_all_reduce(comm::Communicator& world,
                                          const std::vector<int64_t>& sizes, int reps = 20);
// The share of a rank's compute that a `bytes` all-reduce in flight takes from it: a loop of
// 256^3 sgemms on one thread, polling the collective between them as backward polls DDP's
// buckets, run alone and then while the all-reduce runs, on every rank at once (a
// collective). 1 - (the loop's rate while the all-reduce runs / its rate alone), clamped to
// [0, 1]; the median of `reps`, rank 0's.
double measure_transfer_compute_share(comm::Communicator& world, int64_t bytes, int reps = 5);
// memcpy of each size between two buffers of this process, median of `reps` after a warm-up:
// the shared-memory copy an intra-node message costs.
std::vector<TimedSize> measure_memcpy(const std::vector<int64_t>& sizes, int reps = 20);

// Seconds per element of kiri's non-GEMM kernels on one OpenMP thread (each the best of
// `reps` after a warm-up; call them on every rank at once, as kiri launch runs them), the
// kernels a step runs (plan::NonGemmCosts): per logit of [rows, vocab] fp32 logits, the
// one-pass softmax cross-entropy of tp 1 (softmax_xent_forward_backward, in place) and the
// vocab-parallel kernels of tp > 1 (one slice holding the whole vocabulary, no collectives);
// per element, AdamW over n fp32 elements, with or without zeroing the gradient it reads
// (AdamWParams::zero_grad); a gradient's sum of squares (the norm); a gradient's zeroing
// (Tensor::zero_, as ParallelGPT::zero_grad).
double measure_logit_seconds(int64_t rows, int64_t vocab, int reps = 5);
double measure_split_logit_seconds(int64_t rows, int64_t vocab, int reps = 5);
double measure_optimizer_seconds(int64_t n, bool zero_grad = false, int reps = 5);
double measure_gradient_seconds(int64_t n, int reps = 5);
double measure_zeroing_seconds(int64_t n, int reps = 5);

// The median step time of kiri training spec's model on one process (forward, backward,
// AdamW; random tokens), on one OpenMP thread.
double measure_step_seconds(const BenchSpec& spec);

}  // namespace kiri::bench
