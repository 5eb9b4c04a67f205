#include <gtest/gtest.h>

#include <cmath>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

TEST(LayerNorm, ForwardNormalizesWithBiasedVariance) {
  const int64_t N = 4, C = 7;
  Tensor x = randn({N, C}, 1, 3.0), w = randn({C}, 2), b = randn({C}, 3);
  Tensor out = test::empty({N, C}), mean = test::empty({N}), rstd = test::empty({N});
  kernels::layernorm_forward<double>(out, mean, rstd, x, w, b);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x.item(i * C + c) / C;
    for (int64_t c = 0; c < C; ++c) v += std::pow(x.item(i * C + c) - m, 2) / C;
    const double r = 1 / std::sqrt(v + 1e-5);
    EXPECT_NEAR(mean.item(i), m, 1e-12);
    EXPECT_NEAR(rstd.item(i), r, 1e-12);
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(out.item(i * C + c), (x.item(i * C + c) - m) * r * w.item(c) + b.item(c), 1e-12);
  }
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  const int64_t B = 2, T = 3, C = 7;
  Tensor x = randn({B, T, C}, 1, 2.0), w = randn({C}, 2), b = randn({C}, 3);
  Tensor out = test::empty({B, T, C}), mean = test::empty({B, T}), rstd = test::empty({B, T});
  Tensor R = randn({B, T, C}, 4);
  auto loss = [&] {
    kernels::layernorm_forward<double>(out, mean, rstd, x, w, b);
    return test::dot(out, R);
  };
  loss();  // mean and rstd of the unperturbed input, for backward
  Tensor dx = randn(x.shape(), 5), dw = randn(w.shape(), 6), db = randn(b.shape(), 7);
  Tensor dx0 = test::clone(dx), dw0 = test::clone(dw), db0 = test::clone(db);
  kernels::layernorm_backward<double>(dx, dw, db, R, x, w, mean, rstd);
  test::expect_grad_matches_fd(x, test::minus(dx, dx0), loss, "dinp");
  test::expect_grad_matches_fd(w, test::minus(dw, dw0), loss, "dweight");
  test::expect_grad_matches_fd(b, test::minus(db, db0), loss, "dbias");
}

TEST(LayerNorm, RejectsMismatchedShapes) {
  Tensor x = randn({4, 7}, 1), w = randn({6}, 2), b = randn({7}, 3);
  Tensor out = test::empty({4, 7}), mean = test::empty({4}), rstd = test::empty({4});
  try {
    kernels::layernorm_forward<double>(out, mean, rstd, x, w, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[6]"), std::string::npos) << e.what();
  }
  Tensor short_mean = test::empty({3});
  EXPECT_THROW(kernels::layernorm_forward<double>(out, short_mean, rstd, x, randn({7}, 2), b),
               Error);
}

}  // namespace
}  // namespace kiri
