#pragma once
// The hardware's peak FLOP/s per dtype, MFU's denominator (docs/metrics.md):
// measured by a register-only loop of independent FMA chains on one core,
// times the cores (OpenMP threads) a rank computes on. CPU-specific code
// (AVX-512, AVX2/FMA, AVX512_BF16, AVX512_FP16, AMX) stays behind this front.
#include <string>
#include <vector>

#include "kiri/kernels/params.h"
#include "kiri/tensor/dtype.h"

namespace kiri::kernels {

// Measures one core now (uncached), on the calling thread: the best of
// `repeats` short runs (~0.1 ms each) after a warm-up. Per dtype, the fastest
// instruction that can compute that dtype's products with fp32 accumulation
// or better: fp32 FMA for kF32; for kBF16 also vdpbf16ps (AVX512_BF16) and
// AMX tdpbf16ps; for kF16 also vfmadd231ph (AVX512_FP16). A 16-bit product
// is exact in fp32, so fp32 FMA is always one way to compute it and the
// 16-bit peak is never below the fp32 one. kConfig for other dtypes.
CorePeak measure_core_peak(DType dtype, int repeats = 200);
// Each candidate instruction's rate, as measure_core_peak compares them.
std::vector<CorePeak> measure_core_instructions(DType dtype, int repeats = 200);

// measure_core_peak(dtype) once per process per dtype (thread-safe).
const CorePeak& core_peak(DType dtype);

// The peak of a rank computing on `threads` cores: core_peak(dtype) x threads.
double peak_flops(DType dtype, int threads);

// What this CPU offers to the measurement, e.g. "avx512f avx512_bf16 avx512_fp16"
// ("amx_bf16" only where the kernel granted the AMX tile state).
std::string peak_cpu_features();

}  // namespace kiri::kernels
