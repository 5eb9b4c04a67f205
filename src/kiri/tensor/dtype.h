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

}  // namespace kiri
