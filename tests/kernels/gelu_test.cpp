#include <gtest/gtest.h>

#include <cmath>

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

TEST(Gelu, RejectsMismatchedShapes) {
  Tensor x = randn({3, 4}, 1), out = test::empty({4, 3});
  EXPECT_THROW(kernels::gelu_forward<double>(out, x), Error);
}

}  // namespace
}  // namespace kiri
