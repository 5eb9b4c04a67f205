// The residual add fused into LayerNorm and RMSNorm (the block's x1 = x + attn, then norm_2(x1)):
// against their unfused twins bitwise, and against finite differences in double.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <string>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

namespace k = kernels;
using test::randn;

// One norm's tensors and its ops, unfused and fused, so that each test runs on both norms.
struct Norm {
  bool rms;
  Tensor w, b, mean, rstd, dw, db;  // rms: b, mean and db undefined

  Norm(bool rms_norm, int64_t N, int64_t C, DType dt) : rms(rms_norm) {
    w = randn({C}, 20, 1.0, dt);
    dw = randn({C}, 21, 1.0, dt);
    rstd = test::empty({N}, dt);
    if (!rms) {
      b = randn({C}, 22, 1.0, dt);
      db = randn({C}, 23, 1.0, dt);
      mean = test::empty({N}, dt);
    }
  }
  const char* name() const { return rms ? "RMSNorm" : "LayerNorm"; }

  template <typename T>
  void forward(Tensor& out, const Tensor& x) {
    if (rms)
      k::rmsnorm_forward<T>(out, rstd, x, w, 1e-6);
    else
      k::layernorm_forward<T>(out, mean, rstd, x, w, b);
  }
  template <typename T>
  void forward_residual(Tensor& sum, Tensor& out, const Tensor& a, const Tensor& bb) {
    if (rms)
      k::residual_rmsnorm_forward<T>(sum, out, rstd, a, bb, w, 1e-6);
    else
      k::residual_layernorm_forward<T>(sum, out, mean, rstd, a, bb, w, b);
  }
  template <typename T>
  void backward(Tensor& dx, const Tensor& dout, const Tensor& x) {
    if (rms)
      k::rmsnorm_backward<T>(dx, dw, dout, x, w, rstd);
    else
      k::layernorm_backward<T>(dx, dw, db, dout, x, w, mean, rstd);
  }
  template <typename T>
  void backward_residual(Tensor& dx, const Tensor& dbase, const Tensor& dskip, const Tensor& dout,
                         const Tensor& x) {
    if (rms)
      k::rmsnorm_backward_residual<T>(dx, dbase, dskip, dw, dout, x, w, rstd);
    else
      k::layernorm_backward_residual<T>(dx, dbase, dskip, dw, db, dout, x, w, mean, rstd);
  }
};

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.numel() * dtype_size(got.dtype())), 0) << what;
}

// The fused forward and both fused backwards (the block's two: dx1 = dy + norm_2'(dh), and
// dx += norm_1'(dh), then dx += dx1) against the unfused ops, bitwise, in float.
void expect_fused_equals_unfused(bool rms, int64_t N, int64_t C, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  const DType f32 = DType::kF32;
  const std::string at = std::string(rms ? "RMSNorm " : "LayerNorm ") + std::to_string(N) + "x" +
                         std::to_string(C) + ", " + std::to_string(threads) + " threads: ";
  const Tensor a = randn({N, C}, 1, 2.0, f32), b = randn({N, C}, 2, 0.5, f32);
  Norm want(rms, N, C, f32), got(rms, N, C, f32);
  Tensor sum0 = test::empty({N, C}, f32), out0 = test::empty({N, C}, f32);
  k::residual_forward<float>(sum0, a, b);
  want.forward<float>(out0, sum0);
  Tensor sum1 = test::empty({N, C}, f32), out1 = test::empty({N, C}, f32);
  got.forward_residual<float>(sum1, out1, a, b);
  expect_same_bits(sum1, sum0, at + "sum");
  expect_same_bits(out1, out0, at + "out");
  expect_same_bits(got.rstd, want.rstd, at + "rstd");
  if (!rms) expect_same_bits(got.mean, want.mean, at + "mean");

  // dinp = dbase + norm'(dout): the unfused copy, then +=.
  const Tensor dout = randn({N, C}, 3, 1.0, f32), dbase = randn({N, C}, 4, 1.0, f32);
  Tensor dx0 = test::clone(dbase), dx1 = test::empty({N, C}, f32), none;
  want.backward<float>(dx0, dout, sum0);
  got.backward_residual<float>(dx1, dbase, none, dout, sum1);
  expect_same_bits(dx1, dx0, at + "dinp = dbase + norm'");
  // dinp += norm'(dout), then dinp += dskip: in place, as the block's input gradient.
  const Tensor dskip = randn({N, C}, 5, 1.0, f32);
  Tensor dy0 = randn({N, C}, 6, 1.0, f32), dy1 = test::clone(dy0);
  want.backward<float>(dy0, dout, sum0);
  k::residual_forward<float>(dy0, dy0, dskip);
  got.backward_residual<float>(dy1, dy1, dskip, dout, sum1);
  expect_same_bits(dy1, dy0, at + "dinp += norm' + dskip");
  expect_same_bits(got.dw, want.dw, at + "dweight");
  if (!rms) expect_same_bits(got.db, want.db, at + "dbias");
  omp_set_num_threads(saved);
}

TEST(ResidualNorm, FusedEqualsUnfusedBitwise) {
  for (bool rms : {false, true})
    for (int threads : {1, 3}) {
      expect_fused_equals_unfused(rms, 67, 600, threads);  // 40200 elements: the parallel loops
      expect_fused_equals_unfused(rms, 5, 19, threads);    // serial, C not a vector multiple
    }
}

// L = <norm(a + b), R> + <a + b, S> + <a, Q>: the sum feeds the residual stream (S) and a's
// gradient also takes a skip (Q), so dL/da = S + norm'(R) + Q (dbase S, dskip Q) and
// dL/db = S + norm'(R) (no skip); dweight and dbias from either call's sums.
void expect_fused_matches_finite_differences(bool rms) {
  const int64_t B = 2, T = 3, C = 7;
  Tensor a = randn({B, T, C}, 1, 2.0), b = randn({B, T, C}, 2);
  Norm n(rms, B * T, C, DType::kF64);
  const Tensor R = randn({B, T, C}, 3), S = randn({B, T, C}, 4), Q = randn({B, T, C}, 5);
  Tensor sum = test::empty({B, T, C}), out = test::empty({B, T, C});
  auto loss = [&] {
    n.forward_residual<double>(sum, out, a, b);
    return test::dot(out, R) + test::dot(sum, S) + test::dot(a, Q);
  };
  loss();
  const Tensor dw0 = test::clone(n.dw), db0 = rms ? Tensor() : test::clone(n.db);
  Tensor da = randn({B, T, C}, 6), db = randn({B, T, C}, 7), none;  // overwritten
  n.backward_residual<double>(da, S, Q, R, sum);
  const Tensor dw1 = test::clone(n.dw), db1 = rms ? Tensor() : test::clone(n.db);
  n.backward_residual<double>(db, S, none, R, sum);
  const std::string name = n.name();
  test::expect_grad_matches_fd(a, da, loss, name + " da");
  test::expect_grad_matches_fd(b, db, loss, name + " db");
  test::expect_grad_matches_fd(n.w, test::minus(dw1, dw0), loss, name + " dweight");
  if (!rms) test::expect_grad_matches_fd(n.b, test::minus(db1, db0), loss, name + " dbias");
  // The second call added the same parameter gradients again.
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_NEAR(n.dw.item(c) - dw1.item(c), dw1.item(c) - dw0.item(c), 1e-12) << name << " " << c;
    if (!rms) {
      EXPECT_NEAR(n.db.item(c) - db1.item(c), db1.item(c) - db0.item(c), 1e-12) << c;
    }
  }
}

TEST(ResidualNorm, LayerNormGradientsMatchFiniteDifferences) {
  expect_fused_matches_finite_differences(false);
}

TEST(ResidualNorm, RmsNormGradientsMatchFiniteDifferences) {
  expect_fused_matches_finite_differences(true);
}

TEST(ResidualNorm, RejectsMismatchedShapes) {
  const Tensor a = randn({4, 7}, 1), b = randn({4, 6}, 2), w = randn({7}, 3), bias = randn({7}, 4);
  Tensor sum = test::empty({4, 7}), out = test::empty({4, 7}), mean = test::empty({4});
  Tensor rstd = test::empty({4});
  try {
    k::residual_layernorm_forward<double>(sum, out, mean, rstd, a, b, w, bias);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("residual_layernorm_forward: b has shape [4, 6], expected [4, 7]"),
              std::string::npos)
        << m;
  }
  EXPECT_THROW(k::residual_rmsnorm_forward<double>(sum, out, rstd, a, b, w, 1e-6), Error);
  const Tensor g = randn({4, 7}, 5), x = randn({4, 7}, 6), short_skip = randn({3, 7}, 7);
  Tensor dx = test::empty({4, 7}), dw = test::zeros({7}), db = test::zeros({7});
  try {
    k::layernorm_backward_residual<double>(dx, g, short_skip, dw, db, g, x, w, mean, rstd);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("dskip has shape [3, 7], expected 4 rows of 7"), std::string::npos) << m;
  }
  EXPECT_THROW(k::rmsnorm_backward_residual<double>(dx, g, short_skip, dw, g, x, w, rstd), Error);
  Tensor none;
  EXPECT_THROW(k::rmsnorm_backward_residual<double>(none, g, none, dw, g, x, w, rstd), Error);
}

}  // namespace
}  // namespace kiri
