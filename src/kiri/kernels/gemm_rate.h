#pragma once
// What this machine's GEMMs reach, measured: the sustained rates beside the FMA peaks
// (peak.h). The one measurement behind kiri train's mfu_gemm (train/metrics.h), kiri bench's
// GEMM rate and kiri plan --calibrate's (bench/calibrate.h).
#include <cstdint>

namespace kiri::kernels {

// FLOP/s of an n x n x n fp32 GEMM (oneDNN sgemm) on the current OpenMP threads: the best
// of `reps` timed calls after a warm-up one.
double measure_gemm_flops(int64_t n, int reps);
// The same for bf16 A and B into fp32 C through gemm_lowp, on the path training takes
// (gemm_lowp_path: oneDNN's bf16 matmul with AMX, else widened to fp32).
double measure_gemm_bf16_flops(int64_t n, int reps);

}  // namespace kiri::kernels
