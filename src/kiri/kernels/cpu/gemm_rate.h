#pragma once
// The CPU backend's sustained GEMM rates (the front, kiri/kernels/gemm_rate.h, says what
// each measures).
#include <cstdint>

namespace kiri::kernels::cpu {

double measure_gemm_flops(int64_t n, int reps);
double measure_gemm_bf16_flops(int64_t n, int reps);

}  // namespace kiri::kernels::cpu
