#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Gelu, ForwardMatchesTanhFormula) {
  const double xs[] = {-30, -12, -5, -3, -1, -0.1, 0, 1e-3, 0.5, 2, 6, 40};
  const int64_t n = std::size(xs);
  Tensor x = test::empty({n}), out = test::empty({n});
  std::copy(xs, xs + n, x.data<double>());
  kernels::gelu_forward<double>(out, x);
  Tensor xf = test::convert(x, DType::kF32), outf = test::empty({n}, DType::kF32);
  kernels::gelu_forward<float>(outf, xf);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = gelu_ref(xs[i]);
    EXPECT_NEAR(out.item(i), ref, 1e-14 + 1e-12 * std::abs(ref)) << xs[i];
    EXPECT_NEAR(outf.item(i), ref, 1e-30 + 1e-6 * std::abs(ref)) << xs[i];
  }
}

TEST(Gelu, GradientsMatchFiniteDifferences) {
  Tensor x = randn({3, 11}, 1, 2.0), out = test::empty({3, 11}), R = randn({3, 11}, 2);
  auto loss = [&] {
    kernels::gelu_forward<double>(out, x);
    return test::dot(out, R);
  };
  Tensor dx = randn(x.shape(), 3), dx0 = test::clone(dx);
  kernels::gelu_backward<double>(dx, x, R);
  test::expect_grad_matches_fd(x, test::minus(dx, dx0), loss, "dinp");
}

TEST(Gelu, FloatBackwardFiniteAtExtremes) {
  const float xs[] = {-1e4f, -50, -9.5f, 9.5f, 50, 1e4f};
  Tensor x = test::empty({6}, DType::kF32), g = test::empty({6}, DType::kF32);
  Tensor dx = test::zeros({6}, DType::kF32);
  std::copy(xs, xs + 6, x.data<float>());
  g.fill_(1.0);
  kernels::gelu_backward<float>(dx, x, g);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_TRUE(std::isfinite(dx.item(i))) << xs[i];
    EXPECT_NEAR(dx.item(i), xs[i] < 0 ? 0.0 : 1.0, 1e-6) << xs[i];
  }
}

// h = x + bias (bias broadcast over rows), L = sum(GELU(h) * R): gelu_backward_bias on (h, R)
// gives dL/dh, which is dL/dx, and adds dL/dbias (its column sums) into a nonzero dbias.
TEST(Gelu, FusedBiasBackwardMatchesFiniteDifferences) {
  const int64_t N = 5, C = 19;  // C: a 16-column block and a tail
  Tensor x = randn({N, C}, 1, 2.0), bias = randn({C}, 2), R = randn({N, C}, 3);
  Tensor h = test::empty({N, C}), out = test::empty({N, C});
  auto shift = [&] {
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c)
        h.data<double>()[i * C + c] = x.data<double>()[i * C + c] + bias.data<double>()[c];
  };
  auto loss = [&] {
    shift();
    kernels::gelu_forward<double>(out, h);
    return test::dot(out, R);
  };
  shift();
  Tensor dh = randn({N, C}, 4);  // overwritten, not accumulated into
  Tensor db = randn({C}, 5), db0 = test::clone(db);
  kernels::gelu_backward_bias<double>(dh, db, h, R);
  test::expect_grad_matches_fd(x, dh, loss, "dinp");
  test::expect_grad_matches_fd(bias, test::minus(db, db0), loss, "dbias");
}

// The fused backward against its unfused twin, gelu_backward into zeros then linear_backward's
// bias gradient (and the 16-bit layer's rounding and bias sums), bitwise, on 1 and 3 threads.
void expect_fused_backward_equals_twin(DType lowp, int threads) {
  const int64_t N = 67, C = 600, IC = 8;  // C: 37 blocks of 16 and a tail of 8
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Tensor h = randn({N, C}, 1, 3.0, DType::kF32), dout = randn({N, C}, 2, 1.0, DType::kF32);
  Tensor inp = randn({N, IC}, 3, 1.0, DType::kF32), w = randn({IC, C}, 4, 1.0, DType::kF32);
  Tensor dh = test::zeros({N, C}, DType::kF32), none;
  kernels::gelu_backward<float>(dh, h, dout);
  Tensor want_db = randn({C}, 5, 1.0, DType::kF32), want_dw = test::zeros({IC, C}, DType::kF32);
  Tensor got_db = test::clone(want_db);
  Tensor got = test::empty({N, C}, lowp);
  kernels::gelu_backward_bias<float>(got, got_db, h, dout);
  if (lowp == DType::kF32) {
    kernels::linear_backward<float>(none, want_dw, want_db, dh, inp, w);
    EXPECT_EQ(std::memcmp(got.raw(), dh.raw(), N * C * 4), 0) << threads << " threads";
    EXPECT_EQ(std::memcmp(got_db.raw(), want_db.raw(), C * 4), 0) << threads << " threads";
  } else {
    // The 16-bit layer sums the fp32 dout into zeros and adds that into its 16-bit dbias.
    Tensor b16 = test::convert(randn({C}, 6), lowp), want_b16 = test::clone(b16);
    Tensor inp16 = test::convert(inp, lowp), w16 = test::convert(w, lowp);
    Tensor dw16 = test::zeros({IC, C}, lowp);
    kernels::linear_backward_lowp(none, dw16, want_b16, dh, inp16, w16, test::allocator());
    Tensor sums = test::zeros({C}, DType::kF32);
    kernels::gelu_backward_bias<float>(got, sums, h, dout);
    kernels::add_into(b16, sums);
    EXPECT_EQ(std::memcmp(b16.raw(), want_b16.raw(), C * 2), 0) << threads << " threads";
    Tensor want = test::empty({N, C}, lowp);
    kernels::convert(want, dh);
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), N * C * 2), 0) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Gelu, FusedBiasBackwardEqualsUnfusedBitwise) {
  for (int threads : {1, 3}) {
    expect_fused_backward_equals_twin(DType::kF32, threads);
    expect_fused_backward_equals_twin(DType::kBF16, threads);
    expect_fused_backward_equals_twin(DType::kF16, threads);
  }
}

TEST(Gelu, ForwardInto16BitEqualsForwardThenConvert) {
  for (DType lowp : {DType::kBF16, DType::kF16}) {
    Tensor x = randn({37, 1111}, 7, 3.0, DType::kF32), out = test::empty({37, 1111}, DType::kF32);
    kernels::gelu_forward<float>(out, x);
    Tensor want = test::empty({37, 1111}, lowp), got = test::empty({37, 1111}, lowp);
    kernels::convert(want, out);
    kernels::gelu_forward<float>(got, x);
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.numel() * 2), 0) << dtype_name(lowp);
  }
}

TEST(Gelu, FusedRejectsMismatchedShapes) {
  Tensor h = randn({3, 4}, 1, 1.0, DType::kF32), g = randn({3, 4}, 2, 1.0, DType::kF32);
  Tensor db = test::zeros({4}, DType::kF32), wrong_db = test::zeros({3}, DType::kF32);
  Tensor dh = test::empty({3, 4}, DType::kF32), dh16 = test::empty({4, 3}, DType::kBF16);
  EXPECT_THROW(kernels::gelu_backward_bias<float>(dh, wrong_db, h, g), Error);
  EXPECT_THROW(kernels::gelu_backward_bias<float>(dh16, db, h, g), Error);
  Tensor out16 = test::empty({4, 3}, DType::kBF16);
  EXPECT_THROW(kernels::gelu_forward<float>(out16, h), Error);
  Tensor hd = randn({3, 4}, 1), gd = randn({3, 4}, 2), dbd = test::zeros({4});
  Tensor dhd16 = test::empty({3, 4}, DType::kBF16);
  EXPECT_THROW(kernels::gelu_backward_bias<double>(dhd16, dbd, hd, gd), Error);
}

TEST(Gelu, RejectsMismatchedShapes) {
  Tensor x = randn({3, 4}, 1), out = test::empty({4, 3});
  EXPECT_THROW(kernels::gelu_forward<double>(out, x), Error);
}

}  // namespace
}  // namespace kiri
