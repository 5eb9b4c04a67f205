// The binary16 conversions by bit manipulation (float_to_half_bits, half_bits_to_float:
// what a compiler without _Float16 uses) against the compiler's _Float16 where it has one
// (GCC's, F16C instructions under -march=native), and against exact values anywhere.
#include "kiri/tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiri {
namespace {

[[maybe_unused]] uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
[[maybe_unused]] float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every half: exact in a float, and back to itself (a NaN to a quiet NaN of its payload).
TEST(Binary16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = half_bits_to_float(static_cast<uint16_t>(h));
    const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f && mant != 0) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(float_to_half_bits(f), h | 0x200) << h;  // quieted
      continue;
    }
    const double exact = (h & 0x8000 ? -1.0 : 1.0) *
                         (exp == 0x1f ? std::numeric_limits<double>::infinity()
                          : exp == 0  ? std::ldexp(mant, -24)
                                      : std::ldexp(1024 + mant, static_cast<int>(exp) - 25));
    ASSERT_EQ(static_cast<double>(f), exact) << h;
    ASSERT_EQ(float_to_half_bits(f), h) << h;
  }
}

// Halfway between two neighbouring halves rounds to the even one; a hair either side
// rounds to the nearer. Above the largest half (65504) + half an ulp: infinity.
TEST(Binary16, TiesGoToEvenAndOverflowIsInfinite) {
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = half_bits_to_float(static_cast<uint16_t>(h));
    const double hi = half_bits_to_float(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 11 bits + 1 fit a float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << h;
    ASSERT_EQ(float_to_half_bits(mid), (h & 1) ? h + 1 : h) << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(mid, 0.0f)), h) << h;
    ASSERT_EQ(float_to_half_bits(std::nextafter(mid, 1e9f)), h + 1) << h;
    ASSERT_EQ(float_to_half_bits(-mid), ((h & 1) ? h + 1 : h) | 0x8000) << h;
  }
  EXPECT_EQ(float_to_half_bits(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(1e30f), 0x7c00);
  EXPECT_EQ(float_to_half_bits(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::denorm_min()), 0);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
}

#if defined(__FLT16_MANT_DIG__)
// Where the compiler has _Float16, float_to_half / half_to_float use it: the bit version
// agrees with it on every half and on every 61st float (70 million, each exponent and
// NaN payload among them).
TEST(Binary16, BitsEqualTheCompilersFloat16) {
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(bits(half_bits_to_float(static_cast<uint16_t>(h))),
              bits(half_to_float(static_cast<uint16_t>(h))))
        << h;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 61) {
    const float f = from_bits(static_cast<uint32_t>(u));
    ASSERT_EQ(float_to_half_bits(f), float_to_half(f)) << std::hex << u;
  }
}
#else
TEST(Binary16, BitsEqualTheCompilersFloat16) {
  EXPECT_EQ(float_to_half(1.0f), float_to_half_bits(1.0f));
  GTEST_SKIP() << "this compiler has no _Float16: the bit versions are float_to_half itself";
}
#endif

}  // namespace
}  // namespace kiri
