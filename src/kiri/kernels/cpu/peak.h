#pragma once
// The CPU backend's measurement of its peak FLOP/s (the front, kiri/kernels/peak.h, says
// what each returns): the FMA loops per instruction set live in peak.cpp.
#include <string>
#include <vector>

#include "kiri/kernels/params.h"
#include "kiri/tensor/dtype.h"

namespace kiri::kernels::cpu {

CorePeak measure_core_peak(DType dtype, int repeats = 200);
std::vector<CorePeak> measure_core_instructions(DType dtype, int repeats = 200);
const CorePeak& core_peak(DType dtype);
double peak_flops(DType dtype, int threads);
std::string peak_cpu_features();

}  // namespace kiri::kernels::cpu
