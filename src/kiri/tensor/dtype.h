#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace kiri {

// f64 exists for the finite-difference gradient checks; training runs in
// f32, bf16 or f16.
enum class DType { kF32, kBF16, kF16, kF64, kI32, kU16, kU8 };

size_t dtype_size(DType dtype);
// "F32", "BF16", ...: the names safetensors uses.
const char* dtype_name(DType dtype);
DType dtype_from_name(const std::string& name);  // raises kInvalidArgument on an unknown name

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::kU16;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}

// bf16: the top half of an f32, rounded to nearest even (NaN stays NaN).
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE binary16 by bit manipulation, rounded to nearest even, subnormals kept, a NaN's
// top payload bits kept and the result quiet: what the F16C instructions (and _Float16 on
// GCC) give. Used where the compiler has no _Float16 (clang 14 on an x86 CPU without
// AVX512-FP16, which `make fuzz` builds with); tests/tensor/dtype_test.cpp checks it
// against _Float16 on every half and a sweep of the floats.
inline uint16_t float_to_half_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((u >> 13) & 0x3ffu);  // NaN
  if (u >= 0x47800000u) return sign | 0x7c00u;  // |f| >= 65536 (or inf): inf after rounding
  if (u < 0x38800000u) {  // below 2^-14: a subnormal half (or 0), in units of 2^-24
    // Adding 0.5 puts the half's bits in the float's low mantissa, rounded by the FPU
    // (nearest even), as the subnormal half of f.
    float a;
    std::memcpy(&a, &u, 4);
    a += 0.5f;
    uint32_t r;
    std::memcpy(&r, &a, 4);
    return sign | static_cast<uint16_t>(r - 0x3f000000u);
  }
  const uint32_t odd = (u >> 13) & 1u;  // round to nearest, ties to even
  u += 0xc8000fffu + odd;               // rebias the exponent (-112 << 23) and round
  return sign | static_cast<uint16_t>(u >> 13);
}
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0u);  // inf, quiet NaN
  } else if (exp == 0) {  // zero or subnormal: mant x 2^-24, exact in a float
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
#if defined(__FLT16_MANT_DIG__)
inline uint16_t float_to_half(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float half_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
#else
inline uint16_t float_to_half(float f) {
  return float_to_half_bits(f);
}
inline float half_to_float(uint16_t u) {
  return half_bits_to_float(u);
}
#endif

}  // namespace kiri
