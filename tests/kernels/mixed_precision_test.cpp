// The mixed-precision kernels (16-bit weights and gradients, fp32
// activations) against their fp32 versions on the same rounded values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "gemm_lowp_paths.h"
#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

// A 16-bit random tensor and its exact fp32 copy.
struct Pair {
  Tensor lo, f32;
};
Pair random_pair(const Shape& shape, uint64_t stream, double scale, DType dt) {
  Pair p{randn(shape, stream, scale, dt), test::empty(shape, DType::kF32)};
  kernels::convert(p.f32, p.lo);
  return p;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// |t| elementwise (F32).
Tensor abs_of(const Tensor& t) {
  Tensor a = test::clone(t);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = std::abs(a.data<float>()[i]);
  return a;
}

// The lowp kernel and the fp32 one multiply the same rounded values, whose
// products are exact in fp32, so they differ only in the order of n fp32
// roundings: each is within gamma_n * mag of the exact result (mag the same
// sums of absolute values; gamma_n = n u / (1 - n u), u = 2^-24), so they
// differ by at most 2 gamma_n mag; mag computed in fp32 is itself within
// gamma_n of exact. A 16-bit result adds its final rounding, u16 |ref|
// (u16 = 2^-8 bf16, 2^-11 fp16). The worst case, so no summation order fails.
void expect_within_gemm_bound(const Tensor& got, const Tensor& ref, const Tensor& mag, int64_t n,
                              double u16, const char* what) {
  const double u = std::ldexp(1.0, -24), gamma = n * u / (1 - n * u);
  int failures = 0;
  for (int64_t i = 0; i < ref.numel() && failures < 3; ++i) {
    const double r = ref.item(i), bound = u16 * std::abs(r) + 2 * gamma * (1 + gamma) * mag.item(i);
    if (std::abs(got.item(i) - r) > bound) {
      ++failures;
      ADD_FAILURE() << what << "[" << i << "]: " << got.item(i) << " vs " << r << ", bound "
                    << bound;
    }
  }
}

class LinearLowpPath : public ::testing::TestWithParam<std::tuple<kernels::LowpGemmImpl, DType>> {};

TEST_P(LinearLowpPath, MatchesFp32LinearOnRoundedValues) {
  const int64_t N = 37, IC = 45, OC = 29;
  Allocator scratch;
  const DType dt = std::get<1>(GetParam());
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), dt);
  {
    for (bool with_bias : {true, false}) {
      const Pair x = random_pair({N, IC}, 1, 1.0, dt), w = random_pair({IC, OC}, 2, 0.2, dt);
      const Pair b = with_bias ? random_pair({OC}, 3, 0.5, dt) : Pair{};
      Tensor out = test::empty({N, OC}, DType::kF32), ref = test::empty({N, OC}, DType::kF32);
      kernels::linear_forward_lowp(out, x.lo, w.lo, b.lo);
      kernels::linear_forward<float>(ref, x.f32, w.f32, b.f32);
      Tensor mag = test::empty({N, OC}, DType::kF32);
      kernels::linear_forward<float>(mag, abs_of(x.f32), abs_of(w.f32),
                                     with_bias ? abs_of(b.f32) : Tensor());
      expect_within_gemm_bound(out, ref, mag, IC + 1, 0.0, "out");

      // Backward: gradients start nonzero (accumulation); the reference runs
      // in fp32 on the same starting values and on dout rounded to dt, as
      // the 16-bit GEMMs see it.
      Tensor dout = randn({N, OC}, 4, 1.0, DType::kF32);
      Tensor dout_r = test::empty({N, OC}, dt), dout_rf = test::empty({N, OC}, DType::kF32);
      kernels::convert(dout_r, dout);
      kernels::convert(dout_rf, dout_r);
      Tensor dinp = randn({N, IC}, 5, 1.0, DType::kF32), dinp_ref = test::clone(dinp);
      const Tensor dinp0 = test::clone(dinp);
      Pair dw = random_pair({IC, OC}, 6, 1.0, dt);
      const Tensor dw0 = test::clone(dw.f32);
      Pair db = with_bias ? random_pair({OC}, 7, 1.0, dt) : Pair{};
      Tensor dw_ref = test::clone(dw.f32), db_ref = with_bias ? test::clone(db.f32) : Tensor();
      Tensor dinp_unused, dbias_ref_only;
      kernels::linear_backward_lowp(dinp, dw.lo, db.lo, dout, x.lo, w.lo, scratch);
      kernels::linear_backward<float>(dinp_ref, dw_ref, dbias_ref_only, dout_rf, x.f32, w.f32);
      // mag: the same backward on absolute values (the starting gradients too).
      Tensor dinp_mag = abs_of(dinp0), dw_mag = abs_of(dw0), none_b;
      kernels::linear_backward<float>(dinp_mag, dw_mag, none_b, abs_of(dout_rf), abs_of(x.f32),
                                      abs_of(w.f32));
      expect_within_gemm_bound(dinp, dinp_ref, dinp_mag, OC + 1, 0.0, "dinp");
      const double u16 = std::ldexp(1.0, dt == DType::kBF16 ? -8 : -11);
      expect_within_gemm_bound(dw.lo, dw_ref, dw_mag, N + 1, u16, "dweight");
      if (with_bias) {
        // dbias from the fp32 dout (not the rounded one), rounded once.
        Tensor none, dw32 = test::zeros({IC, OC}, DType::kF32);
        kernels::linear_backward<float>(none, dw32, db_ref, dout, x.f32, w.f32);
        Tensor want = test::empty({OC}, dt);
        kernels::convert(want, db_ref);
        EXPECT_TRUE(same_bits(db.lo, want)) << dtype_name(dt);
      }
      // dinp undefined is skipped.
      kernels::linear_backward_lowp(dinp_unused, dw.lo, db.lo, dout, x.lo, w.lo, scratch);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, LinearLowpPath,
                         ::testing::Combine(::testing::Values(kernels::LowpGemmImpl::kViaF32,
                                                              kernels::LowpGemmImpl::kOneDnnMatmul,
                                                              kernels::LowpGemmImpl::kPacked),
                                            ::testing::Values(DType::kBF16, DType::kF16)),
                         [](const auto& info) {
                           return std::string(
                                      kernels::gemm_lowp_impl_name(std::get<0>(info.param))) +
                                  "_" + (std::get<1>(info.param) == DType::kBF16 ? "bf16" : "fp16");
                         });

TEST(LinearLowp, RejectsMixedDtypes) {
  Allocator scratch;
  Tensor x = randn({3, 4}, 1, 1.0, DType::kBF16), w = randn({4, 5}, 2, 1.0, DType::kF16);
  Tensor out = test::empty({3, 5}, DType::kF32);
  EXPECT_THROW(kernels::linear_forward_lowp(out, x, w, Tensor()), Error);
  Tensor w32 = randn({4, 5}, 2, 1.0, DType::kF32);
  EXPECT_THROW(kernels::linear_forward_lowp(out, x, w32, Tensor()), Error);
}

Tensor make_tokens() {  // [2, 3] with repeats
  Tensor tok = test::empty({2, 3}, DType::kI32);
  const int32_t ids[] = {1, 3, 1, 3, 3, 0};
  std::copy(ids, ids + 6, tok.data<int32_t>());
  return tok;
}

TEST(EmbeddingLowp, SixteenBitTablesAndGradientsMatchFp32) {
  const int64_t C = 300;  // more than one 256-column block
  const Tensor tok = make_tokens();
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const Pair wte = random_pair({5, C}, 1, 1.0, dt), wpe = random_pair({4, C}, 2, 1.0, dt);
    Tensor out = test::empty({2, 3, C}, DType::kF32), ref = test::empty({2, 3, C}, DType::kF32);
    kernels::embedding_forward<float>(out, tok, wte.lo, wpe.lo);
    kernels::embedding_forward<float>(ref, tok, wte.f32, wpe.f32);
    EXPECT_TRUE(same_bits(out, ref)) << dtype_name(dt);
    kernels::embedding_forward<float>(out, tok, wte.lo, wpe.f32);  // mixed tables
    EXPECT_TRUE(same_bits(out, ref)) << dtype_name(dt);

    // Position gradient: summed over the batch in fp32, rounded once.
    const Tensor dout = randn({2, 3, C}, 3, 1.0, DType::kF32);
    Pair dwpe = random_pair({4, C}, 4, 1.0, dt);
    kernels::position_embedding_backward<float>(dwpe.lo, dout);
    kernels::position_embedding_backward<float>(dwpe.f32, dout);
    Tensor want = test::empty({4, C}, dt);
    kernels::convert(want, dwpe.f32);
    EXPECT_TRUE(same_bits(dwpe.lo, want)) << dtype_name(dt);

    // Token gradient: each occurrence added in fp32 and rounded, in order.
    Pair dwte = random_pair({5, C}, 5, 1.0, dt);
    Tensor expect = test::clone(dwte.lo);
    const Tensor rows = dout.view({6, C});
    for (int64_t i = 0; i < 6; ++i) {
      Tensor dst = expect.slice(tok.data<int32_t>()[i], tok.data<int32_t>()[i] + 1).view({C});
      kernels::add_into(dst, rows.slice(i, i + 1).view({C}));
    }
    kernels::token_embedding_backward<float>(dwte.lo, rows, tok.view({6}));
    EXPECT_TRUE(same_bits(dwte.lo, expect)) << dtype_name(dt);
    // embedding_backward takes 16-bit gradients too.
    Pair a = random_pair({5, C}, 6, 1.0, dt), b = random_pair({4, C}, 7, 1.0, dt);
    kernels::embedding_backward<float>(a.lo, b.lo, dout, tok);
    kernels::embedding_backward<float>(a.f32, b.f32, dout, tok);
    // One rounding per occurrence (token 3 occurs three times).
    EXPECT_LT(test::max_rel_diff(a.lo, a.f32), 3.0 / 256) << dtype_name(dt);
  }
  // double stays F64-only.
  Tensor out64 = test::empty({2, 3, 4});
  EXPECT_THROW(kernels::embedding_forward<double>(out64, tok, randn({5, 4}, 1, 1.0, DType::kBF16),
                                                  randn({4, 4}, 2, 1.0, DType::kBF16)),
               Error);
}

TEST(AdamWLowp, SixteenBitGradAndCopyMatchFp32Exactly) {
  const int64_t n = 100003;  // parallel, with a partial last chunk
  kernels::AdamWParams hp;
  hp.lr = 1e-2f, hp.weight_decay = 0.1f, hp.grad_scale = 0.7f;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const Pair g = random_pair({n}, 1, 1e-2, dt);
    Tensor p = randn({n}, 2, 1.0, DType::kF32), m = randn({n}, 3, 1e-3, DType::kF32);
    Tensor v = randn({n}, 4, 1e-3, DType::kF32);
    for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::abs(v.data<float>()[i]);
    Tensor p_ref = test::clone(p), m_ref = test::clone(m), v_ref = test::clone(v);
    Tensor copy = test::empty({n}, dt);
    for (int64_t step = 1; step <= 2; ++step) {
      hp.step = step;
      kernels::adamw_update(p, g.lo, m, v, hp, &copy);
      kernels::adamw_update(p_ref, g.f32, m_ref, v_ref, hp);
    }
    EXPECT_TRUE(same_bits(p, p_ref)) << dtype_name(dt);
    EXPECT_TRUE(same_bits(m, m_ref)) << dtype_name(dt);
    EXPECT_TRUE(same_bits(v, v_ref)) << dtype_name(dt);
    Tensor want = test::empty({n}, dt);
    kernels::convert(want, p_ref);
    EXPECT_TRUE(same_bits(copy, want)) << dtype_name(dt);
    Tensor wrong = test::empty({n - 1}, dt);
    EXPECT_THROW(kernels::adamw_update(p, g.lo, m, v, hp, &wrong), Error);
    Tensor f32copy = test::empty({n}, DType::kF32);
    EXPECT_THROW(kernels::adamw_update(p, g.lo, m, v, hp, &f32copy), Error);
  }
}

TEST(SumOfSquaresLowp, MatchesTheWidenedValues) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const Pair x = random_pair({200003}, 1, 1.0, dt);
    const double lo = kernels::sum_of_squares(x.lo), ref = kernels::sum_of_squares(x.f32);
    EXPECT_NEAR(lo, ref, 1e-12 * ref) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace kiri
