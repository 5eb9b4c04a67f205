#pragma once
// The CPU backend's memory bandwidth measurement (the front, kiri/kernels/bandwidth.h, says
// what each returns).
#include <cstdint>

namespace kiri::kernels::cpu {

int64_t default_bandwidth_array_bytes();
double measure_memory_bandwidth(int threads, int64_t array_bytes, int repeats);

}  // namespace kiri::kernels::cpu
