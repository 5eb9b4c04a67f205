#pragma once
// Internal to the CPU kernels: 16-bit <-> fp32 conversion of contiguous runs,
// vectorised with AVX-512 where the compiler targets it, bitwise identical to
// float_to_bf16 / float_to_half (round to nearest even, denormals kept, NaN
// stays NaN). Serial: callers parallelise over chunks.
#include <cstdint>

#include "kiri/tensor/dtype.h"
#include "kiri/tensor/tensor.h"

namespace kiri::kernels::cpu::detail {

inline bool is_lowp(DType d) {
  return d == DType::kBF16 || d == DType::kF16;
}

// One element of a 16-bit or fp32 array as float (slow path, tails).
inline float load_as_float(const void* p, DType dt, int64_t i) {
  if (dt == DType::kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return dt == DType::kBF16 ? bf16_to_float(h) : half_to_float(h);
}

// dst[n] (fp32) = src[n] of dtype `sd` (F32, BF16 or F16).
void to_f32(float* dst, const void* src, DType sd, int64_t n);
// dst[n] of dtype `dd` (F32, BF16 or F16) = round(src[n]).
void from_f32(void* dst, DType dd, const float* src, int64_t n);
// dst[n] of dtype `dd` = round(dst + src[n]), the sum in fp32.
void add_f32_into(void* dst, DType dd, const float* src, int64_t n);

// F32, BF16 or F16, else an error naming the op and the argument.
void check_float_dtype(const Tensor& t, const char* op, const char* name);

}  // namespace kiri::kernels::cpu::detail
