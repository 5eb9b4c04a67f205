// convert, add_into and all_finite: bitwise against the scalar dtype.h
// conversions, special values included.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/base/rng.h"
#include "kiri/kernels/ops.h"
#include "kiri/tensor/dtype.h"

namespace kiri {
namespace {

// Special floats (NaNs with payloads and both quiet bits, infinities, zeros,
// fp32 denormals, fp16 denormals and overflow, bf16 rounding ties and the
// largest values) followed by random ones over a wide exponent range; n is
// not a multiple of 16 and large enough for the parallel path.
std::vector<float> special_and_random(int64_t n) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u),
                          std::bit_cast<float>(0xffc12345u),
                          std::bit_cast<float>(0x7fbfffffu),
                          std::bit_cast<float>(0x00000001u),
                          std::bit_cast<float>(0x807fffffu),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          65504.0f,
                          65520.0f,
                          65519.99f,
                          1e5f,
                          -1e6f,
                          6e-8f,
                          3e-8f,
                          2.98e-8f,
                          1e-5f,
                          -6.1e-5f,
                          std::bit_cast<float>(0x3f808000u),
                          std::bit_cast<float>(0x3f818000u),
                          std::bit_cast<float>(0x3f808001u),
                          std::bit_cast<float>(0x7f7f8000u),
                          1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048};
  for (int64_t i = static_cast<int64_t>(v.size()); i < n; ++i) {
    const double e = 40.0 * (random_uniform(5, 1, i) - 0.5);
    v.push_back(static_cast<float>(random_normal(5, 2, i) * std::exp2(e)));
  }
  return v;
}

Tensor f32_tensor(const std::vector<float>& v) {
  Tensor t = test::empty({static_cast<int64_t>(v.size())}, DType::kF32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

uint16_t bits16(const Tensor& t, int64_t i) {
  return static_cast<const uint16_t*>(t.raw())[i];
}

uint16_t scalar_round(DType dt, float f) {
  return dt == DType::kBF16 ? float_to_bf16(f) : float_to_half(f);
}
float scalar_widen(DType dt, uint16_t h) {
  return dt == DType::kBF16 ? bf16_to_float(h) : half_to_float(h);
}

TEST(Convert, BitwiseLikeTheScalarFunctions) {
  for (int64_t n : {int64_t(29), int64_t(100003)}) {
    const std::vector<float> v = special_and_random(n);
    Tensor src = f32_tensor(v);
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Tensor lo = test::empty(src.shape(), dt), back = test::empty(src.shape(), DType::kF32);
      kernels::convert(lo, src);
      kernels::convert(back, lo);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t want = scalar_round(dt, v[i]);
        ASSERT_EQ(bits16(lo, i), want) << dtype_name(dt) << " of " << v[i] << " (0x" << std::hex
                                       << std::bit_cast<uint32_t>(v[i]) << ") at " << std::dec << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(back.data<float>()[i]),
                  std::bit_cast<uint32_t>(scalar_widen(dt, want)))
            << dtype_name(dt) << " widened at " << i;
      }
      // Between the two 16-bit types: through fp32.
      const DType other = dt == DType::kBF16 ? DType::kF16 : DType::kBF16;
      Tensor cross = test::empty(src.shape(), other);
      kernels::convert(cross, lo);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(bits16(cross, i), scalar_round(other, scalar_widen(dt, bits16(lo, i)))) << i;
      // Same dtype: a copy.
      Tensor same = test::empty(src.shape(), dt);
      kernels::convert(same, lo);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits16(same, i), bits16(lo, i));
    }
  }
}

TEST(Convert, RejectsMismatches) {
  Tensor a = test::zeros({4}, DType::kF32), b = test::zeros({5}, DType::kBF16);
  EXPECT_THROW(kernels::convert(b, a), Error);
  Tensor d = test::zeros({4}, DType::kF64), h = test::zeros({4}, DType::kF16);
  EXPECT_THROW(kernels::convert(h, d), Error);
  EXPECT_THROW(kernels::add_into(h, h), Error);  // src must be F32
}

TEST(AddInto, RoundsTheFp32SumOnce) {
  const int64_t n = 70001;
  const std::vector<float> v = special_and_random(n);
  Tensor src = test::randn({n}, 9, 0.01, DType::kF32);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor dst = test::empty({n}, dt);
    kernels::convert(dst, f32_tensor(v));
    Tensor before = test::clone(dst);
    kernels::add_into(dst, src);
    for (int64_t i = 0; i < n; ++i) {
      const float s = src.data<float>()[i];
      if (dt == DType::kF32) {
        const float want = before.data<float>()[i] + s;
        ASSERT_EQ(std::bit_cast<uint32_t>(dst.data<float>()[i]), std::bit_cast<uint32_t>(want))
            << i;
      } else {
        const uint16_t want = scalar_round(dt, scalar_widen(dt, bits16(before, i)) + s);
        ASSERT_EQ(bits16(dst, i), want) << dtype_name(dt) << " at " << i;
      }
    }
  }
}

TEST(AllFinite, FindsInfAndNaNInEveryDtype) {
  const int64_t n = 100000;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor x = test::randn({n}, 4, 1.0, dt);
    EXPECT_TRUE(kernels::all_finite(x)) << dtype_name(dt);
    for (float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN()}) {
      for (int64_t at : {int64_t(0), n / 2 + 3, n - 1}) {
        Tensor y = test::clone(x);
        Tensor one = test::empty({1}, dt);
        kernels::convert(one, f32_tensor({bad}));
        y.flat_range(at, 1).copy_from(one);
        EXPECT_FALSE(kernels::all_finite(y)) << dtype_name(dt) << " " << bad << " at " << at;
      }
    }
  }
  // 1e5 is finite as F32 but overflows F16.
  Tensor h = test::empty({1}, DType::kF16);
  kernels::convert(h, f32_tensor({1e5f}));
  EXPECT_FALSE(kernels::all_finite(h));
  EXPECT_TRUE(kernels::all_finite(test::zeros({0}, DType::kBF16)));
  EXPECT_THROW(kernels::all_finite(test::zeros({2}, DType::kF64)), Error);
}

}  // namespace
}  // namespace kiri
