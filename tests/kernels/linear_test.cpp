#include <gtest/gtest.h>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

// L = sum(linear(inp) * R); the gradients start nonzero to check that
// backward accumulates.
void check_linear_grads(bool with_bias) {
  const int64_t B = 2, T = 3, IC = 5, OC = 4;
  Tensor inp = randn({B, T, IC}, 1), w = randn({IC, OC}, 2, 0.5);
  Tensor bias = with_bias ? randn({OC}, 3) : Tensor();
  Tensor R = randn({B, T, OC}, 4), out = test::empty({B, T, OC});
  auto loss = [&] {
    kernels::linear_forward<double>(out, inp, w, bias);
    return test::dot(out, R);
  };
  Tensor dinp = randn(inp.shape(), 5), dw = randn(w.shape(), 6);
  Tensor db = with_bias ? randn({OC}, 7) : Tensor();
  Tensor dinp0 = test::clone(dinp), dw0 = test::clone(dw);
  Tensor db0 = with_bias ? test::clone(db) : Tensor();
  kernels::linear_backward<double>(dinp, dw, db, R, inp, w);
  test::expect_grad_matches_fd(inp, test::minus(dinp, dinp0), loss, "dinp");
  test::expect_grad_matches_fd(w, test::minus(dw, dw0), loss, "dweight");
  if (with_bias) test::expect_grad_matches_fd(bias, test::minus(db, db0), loss, "dbias");
}

TEST(Linear, GradientsMatchFiniteDifferencesWithBias) {
  check_linear_grads(true);
}
TEST(Linear, GradientsMatchFiniteDifferencesWithoutBias) {
  check_linear_grads(false);
}

TEST(Linear, ForwardAddsBias) {
  Tensor inp = test::zeros({3, 2}), w = randn({2, 4}, 1), b = randn({4}, 2);
  Tensor out = test::empty({3, 4});
  kernels::linear_forward<double>(out, inp, w, b);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(out.item(i * 4 + j), b.item(j));
}

TEST(Linear, UndefinedDinpIsSkipped) {
  Tensor inp = randn({3, 2}, 1), w = randn({2, 4}, 2), dout = randn({3, 4}, 3);
  Tensor dinp, dw = test::zeros({2, 4}), db;
  kernels::linear_backward<double>(dinp, dw, db, dout, inp, w);
  EXPECT_NE(dw.item(0), 0.0);
}

// A dout that a fused kernel already rounded to the weights' dtype gives what the fp32 dout
// gives (the layer rounds it itself), bitwise; with it the bias gradient is the caller's.
TEST(Linear, LowpBackwardTakesARoundedDout) {
  const int64_t N = 6, IC = 5, OC = 7;
  Tensor x = randn({N, IC}, 1, 1.0, DType::kBF16), w = randn({IC, OC}, 2, 1.0, DType::kBF16);
  Tensor dout = randn({N, OC}, 3, 1.0, DType::kF32), dout16 = test::empty({N, OC}, DType::kBF16);
  kernels::convert(dout16, dout);
  Tensor dx = test::zeros({N, IC}, DType::kF32), dw = test::zeros({IC, OC}, DType::kBF16);
  Tensor dx2 = test::clone(dx), dw2 = test::clone(dw), none;
  kernels::linear_backward_lowp(dx, dw, none, dout, x, w, test::allocator());
  kernels::linear_backward_lowp(dx2, dw2, none, dout16, x, w, test::allocator());
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_EQ(dx.item(i), dx2.item(i)) << i;
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_EQ(dw.item(i), dw2.item(i)) << i;
  Tensor db = test::zeros({OC}, DType::kBF16);
  EXPECT_THROW(kernels::linear_backward_lowp(dx2, dw2, db, dout16, x, w, test::allocator()), Error);
}

TEST(Linear, RejectsMismatchedShapes) {
  Tensor inp = randn({3, 2}, 1), w = randn({3, 4}, 2), out = test::empty({3, 4});
  try {
    kernels::linear_forward<double>(out, inp, w, Tensor());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 2]"), std::string::npos) << e.what();
  }
  Tensor wf = randn({2, 4}, 2, 1.0, DType::kF32);
  EXPECT_THROW(kernels::linear_forward<double>(out, inp, wf, Tensor()), Error);
}

}  // namespace
}  // namespace kiri
