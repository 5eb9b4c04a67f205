#pragma once
// Internal to the CPU kernels: elementwise math that vectorizes. glibc's
// vector expf is only declared under -ffast-math, so a plain std::exp in a
// loop costs a libm call per element (~10x slower on the softmax and GELU
// loops). The double overloads keep libm: they serve the gradient checks.
#include <bit>
#include <cmath>
#include <cstdint>

namespace kiri::kernels::cpu::detail {

// exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2/2, Cephes' expf
// polynomial (~1 ulp). Results stay normal: x < -87 gives exactly 0, x > 88
// is clamped to exp(88). NaN propagates.
inline float exp_fast(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  // Round to nearest with the 1.5 * 2^23 trick (branch-free, vectorizes).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // Cody-Waite: ln2 in two parts so r keeps full precision.
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : p * scale;
}
inline double exp_fast(double x) {
  return std::exp(x);
}

}  // namespace kiri::kernels::cpu::detail
