#include <gtest/gtest.h>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

TEST(Residual, GradientsMatchFiniteDifferences) {
  Tensor a = randn({2, 3, 5}, 1), b = randn({2, 3, 5}, 2), R = randn({2, 3, 5}, 3);
  Tensor out = test::empty({2, 3, 5});
  auto loss = [&] {
    kernels::residual_forward<double>(out, a, b);
    return test::dot(out, R);
  };
  loss();
  EXPECT_EQ(out.item(7), a.item(7) + b.item(7));
  Tensor da = randn(a.shape(), 4), db = randn(b.shape(), 5);
  Tensor da0 = test::clone(da), db0 = test::clone(db);
  kernels::residual_backward<double>(da, db, R);
  test::expect_grad_matches_fd(a, test::minus(da, da0), loss, "da");
  test::expect_grad_matches_fd(b, test::minus(db, db0), loss, "db");
}

TEST(Residual, RejectsMismatchedShapes) {
  Tensor a = randn({2, 3}, 1), b = randn({3, 2}, 2), out = test::empty({2, 3});
  EXPECT_THROW(kernels::residual_forward<double>(out, a, b), Error);
}

}  // namespace
}  // namespace kiri
