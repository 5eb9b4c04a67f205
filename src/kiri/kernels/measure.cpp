#include "kiri/kernels/bandwidth.h"
#include "kiri/kernels/cpu/bandwidth.h"
#include "kiri/kernels/cpu/gemm_rate.h"
#include "kiri/kernels/cpu/peak.h"
#include "kiri/kernels/gemm_rate.h"
#include "kiri/kernels/peak.h"

// The measurement fronts (peak.h, gemm_rate.h, bandwidth.h): the rank computes on the host's cores,
// so they measure the CPU backend. A device backend would answer for its own device here.
namespace kiri::kernels {

CorePeak measure_core_peak(DType dtype, int repeats) {
  return cpu::measure_core_peak(dtype, repeats);
}

std::vector<CorePeak> measure_core_instructions(DType dtype, int repeats) {
  return cpu::measure_core_instructions(dtype, repeats);
}

const CorePeak& core_peak(DType dtype) {
  return cpu::core_peak(dtype);
}

double peak_flops(DType dtype, int threads) {
  return cpu::peak_flops(dtype, threads);
}

std::string peak_cpu_features() {
  return cpu::peak_cpu_features();
}

double measure_gemm_flops(int64_t n, int reps) {
  return cpu::measure_gemm_flops(n, reps);
}

double measure_gemm_bf16_flops(int64_t n, int reps) {
  return cpu::measure_gemm_bf16_flops(n, reps);
}

int64_t default_bandwidth_array_bytes() {
  return cpu::default_bandwidth_array_bytes();
}

double measure_memory_bandwidth(int threads, int64_t array_bytes, int repeats) {
  return cpu::measure_memory_bandwidth(threads, array_bytes, repeats);
}

}  // namespace kiri::kernels
