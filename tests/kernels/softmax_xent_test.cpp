#include <gtest/gtest.h>

#include <cmath>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

// N=4 rows over V=7, row 2 ignored (target -1).
Tensor make_targets() {
  Tensor t = test::empty({4}, DType::kI32);
  const int32_t ids[] = {3, 0, -1, 6};
  std::copy(ids, ids + 4, t.data<int32_t>());
  return t;
}

TEST(SoftmaxXent, ForwardIsLogSumExpMinusTarget) {
  Tensor logits = randn({4, 7}, 1, 30.0), targets = make_targets();  // large: needs the max
  Tensor losses = test::empty({4}), lse = test::empty({4});
  kernels::softmax_xent_forward<double>(losses, lse, logits, targets);
  for (int64_t i = 0; i < 4; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < 7; ++j) m = std::max(m, logits.item(i * 7 + j));
    for (int64_t j = 0; j < 7; ++j) s += std::exp(logits.item(i * 7 + j) - m);
    EXPECT_NEAR(lse.item(i), m + std::log(s), 1e-12);
    const int32_t t = targets.data<int32_t>()[i];
    EXPECT_NEAR(losses.item(i), t < 0 ? 0.0 : m + std::log(s) - logits.item(i * 7 + t), 1e-12);
  }
}

TEST(SoftmaxXent, GradientsMatchFiniteDifferencesWithIgnoredTarget) {
  Tensor logits = randn({4, 7}, 1, 2.0), targets = make_targets(), R = randn({4}, 2);
  Tensor losses = test::empty({4}), lse = test::empty({4});
  auto loss = [&] {
    kernels::softmax_xent_forward<double>(losses, lse, logits, targets);
    return test::dot(losses, R);
  };
  loss();
  Tensor dlogits = test::clone(logits);
  kernels::softmax_xent_backward<double>(dlogits, lse, targets, R);
  for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(dlogits.item(2 * 7 + j), 0.0);
  test::expect_grad_matches_fd(logits, dlogits, loss, "dlogits");
}

TEST(SoftmaxXent, RejectsTargetOutsideVocabulary) {
  Tensor logits = randn({4, 6}, 1), targets = make_targets();  // target 6 with V = 6
  Tensor losses = test::empty({4}), lse = test::empty({4});
  EXPECT_THROW(kernels::softmax_xent_forward<double>(losses, lse, logits, targets), Error);
  Tensor short_losses = test::empty({3});
  EXPECT_THROW(kernels::softmax_xent_forward<double>(short_losses, lse, randn({4, 7}, 1), targets),
               Error);
}

}  // namespace
}  // namespace kiri
