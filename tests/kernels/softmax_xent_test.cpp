#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

TEST(SoftmaxXent, OnePassGradientsMatchFiniteDifferences) {
  Tensor logits = randn({4, 7}, 1, 2.0), targets = make_targets(), R = randn({4}, 2);
  Tensor losses = test::empty({4}), lse = test::empty({4});
  auto loss = [&] {
    kernels::softmax_xent_forward<double>(losses, lse, logits, targets);
    return test::dot(losses, R);
  };
  Tensor work = test::clone(logits), none;  // logits in, dlogits out
  Tensor fused_losses = test::empty({4}), fused_lse = test::empty({4});
  kernels::softmax_xent_forward_backward<double>(fused_losses, fused_lse, work, none, targets, R);
  loss();
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(fused_losses.item(i), losses.item(i)) << i;
    EXPECT_EQ(fused_lse.item(i), lse.item(i)) << i;
  }
  for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(work.item(2 * 7 + j), 0.0);
  test::expect_grad_matches_fd(logits, work, loss, "dlogits");
}

// The one-pass kernel against its unfused twin (forward, backward, then convert for a 16-bit
// gradient) on float rows wider than a vector and a summation block, over enough rows to run
// on every thread: bitwise equal.
void expect_one_pass_equals_pair(DType lowp) {
  const int64_t N = 37, V = 2053;
  Tensor logits = randn({N, V}, 5, 4.0, DType::kF32), dloss = randn({N}, 6, 1.0, DType::kF32);
  Tensor targets = test::empty({N}, DType::kI32);
  for (int64_t i = 0; i < N; ++i)
    targets.data<int32_t>()[i] = i % 9 == 4 ? -1 : static_cast<int32_t>((i * 811) % V);
  Tensor losses = test::empty({N}, DType::kF32), lse = test::empty({N}, DType::kF32);
  Tensor pair = test::clone(logits);
  kernels::softmax_xent_forward<float>(losses, lse, pair, targets);
  kernels::softmax_xent_backward<float>(pair, lse, targets, dloss);
  Tensor want = pair, got16;  // [N, V]
  if (lowp != DType::kF32) {
    want = test::empty({N, V}, lowp);
    kernels::convert(want, pair);
    got16 = test::empty({N, V}, lowp);
  }
  Tensor f_losses = test::empty({N}, DType::kF32), f_lse = test::empty({N}, DType::kF32);
  Tensor work = test::clone(logits);
  kernels::softmax_xent_forward_backward<float>(f_losses, f_lse, work, got16, targets, dloss);
  const Tensor& got = lowp == DType::kF32 ? work : got16;
  EXPECT_EQ(std::memcmp(f_losses.raw(), losses.raw(), N * 4), 0) << "losses";
  EXPECT_EQ(std::memcmp(f_lse.raw(), lse.raw(), N * 4), 0) << "lse";
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), N * V * dtype_size(got.dtype())), 0)
      << "dlogits " << dtype_name(lowp);
  if (lowp != DType::kF32) {
    EXPECT_EQ(std::memcmp(work.raw(), pair.raw(), N * V * 4), 0) << "the fp32 gradient";
  }
}

TEST(SoftmaxXent, OnePassEqualsForwardThenBackwardBitwise) {
  expect_one_pass_equals_pair(DType::kF32);
  expect_one_pass_equals_pair(DType::kBF16);
  expect_one_pass_equals_pair(DType::kF16);
}

TEST(SoftmaxXent, OnePassRejectsAWrongGradientBuffer) {
  Tensor logits = randn({4, 7}, 1, 1.0, DType::kF32), targets = make_targets();
  Tensor losses = test::empty({4}, DType::kF32), lse = test::empty({4}, DType::kF32);
  Tensor dloss = randn({4}, 2, 1.0, DType::kF32);
  Tensor f32 = test::empty({4, 7}, DType::kF32), short16 = test::empty({4, 6}, DType::kBF16);
  EXPECT_THROW(
      kernels::softmax_xent_forward_backward<float>(losses, lse, logits, f32, targets, dloss),
      Error);
  EXPECT_THROW(
      kernels::softmax_xent_forward_backward<float>(losses, lse, logits, short16, targets, dloss),
      Error);
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
