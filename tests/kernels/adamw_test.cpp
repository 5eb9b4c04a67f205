#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

TEST(AdamW, TwoStepsMatchHandComputedReference) {
  kernels::AdamWParams hp;
  hp.lr = 0.1f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f;
  hp.grad_scale = 0.5f;
  const double p0[] = {1.0, -2.0, 0.5, 3.0};
  const double g1[] = {0.4, -0.8, 0.0, 2.0}, g2[] = {-0.2, -0.6, 1.0, 2.0};
  Tensor p = test::empty({4}, DType::kF32), g = test::empty({4}, DType::kF32);
  Tensor m = test::zeros({4}, DType::kF32), v = test::zeros({4}, DType::kF32);
  for (int i = 0; i < 4; ++i) p.data<float>()[i] = static_cast<float>(p0[i]);

  // Step 1: with bias correction, mhat = g', vhat = g'^2 (g' = 0.5 g), so
  // p1 = p0 (1 - lr wd) - lr g' / (|g'| + eps).
  for (int i = 0; i < 4; ++i) g.data<float>()[i] = static_cast<float>(g1[i]);
  hp.step = 1;
  kernels::adamw_update(p, g, m, v, hp);
  double ref[4], mr[4], vr[4];
  for (int i = 0; i < 4; ++i) {
    const double gs = 0.5 * g1[i];
    ref[i] = p0[i] * (1 - 0.1 * 0.1) - 0.1 * gs / (std::abs(gs) + 1e-8);
    mr[i] = 0.1 * gs;
    vr[i] = 0.05 * gs * gs;
    EXPECT_NEAR(p.item(i), ref[i], 1e-6 * std::abs(ref[i])) << i;
    EXPECT_NEAR(m.item(i), mr[i], 1e-7) << i;
    EXPECT_NEAR(v.item(i), vr[i], 1e-6 * vr[i]) << i;
  }
  EXPECT_FLOAT_EQ(p.item(0), 0.99f - 0.1f);  // 1 * 0.99 - 0.1 * sign

  // Step 2, from the spec's formulas.
  for (int i = 0; i < 4; ++i) g.data<float>()[i] = static_cast<float>(g2[i]);
  hp.step = 2;
  kernels::adamw_update(p, g, m, v, hp);
  for (int i = 0; i < 4; ++i) {
    const double gs = 0.5 * g2[i];
    double q = ref[i] - 0.1 * 0.1 * ref[i];
    mr[i] = 0.9 * mr[i] + 0.1 * gs;
    vr[i] = 0.95 * vr[i] + 0.05 * gs * gs;
    const double mhat = mr[i] / (1 - 0.9 * 0.9), vhat = vr[i] / (1 - 0.95 * 0.95);
    q -= 0.1 * mhat / (std::sqrt(vhat) + 1e-8);
    EXPECT_NEAR(p.item(i), q, 1e-6 * std::abs(q)) << i;
    EXPECT_NEAR(m.item(i), mr[i], 1e-7) << i;
    EXPECT_NEAR(v.item(i), vr[i], 1e-6 * vr[i]) << i;
  }
}

TEST(AdamW, RejectsMismatchedTensors) {
  Tensor p = test::zeros({4}, DType::kF32), g = test::zeros({5}, DType::kF32);
  Tensor m = test::zeros({4}, DType::kF32), v = test::zeros({4}, DType::kF32);
  EXPECT_THROW(kernels::adamw_update(p, g, m, v, {}), Error);
  Tensor gd = test::zeros({4});
  EXPECT_THROW(kernels::adamw_update(p, gd, m, v, {}), Error);
  kernels::AdamWParams hp;
  hp.step = 0;
  Tensor g4 = test::zeros({4}, DType::kF32);
  EXPECT_THROW(kernels::adamw_update(p, g4, m, v, hp), Error);
}

TEST(SumOfSquares, MatchesNaiveAndIgnoresThreadCount) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    Tensor x = randn({200003}, 1, 1.0, dt);
    double ref = 0;
    for (int64_t i = 0; i < x.numel(); ++i) ref += x.item(i) * x.item(i);
    const int threads = omp_get_max_threads();
    const double all = kernels::sum_of_squares(x);
    omp_set_num_threads(1);
    const double one = kernels::sum_of_squares(x);
    omp_set_num_threads(threads);
    EXPECT_NEAR(all, ref, 1e-12 * ref) << dtype_name(dt);
    EXPECT_EQ(all, one) << dtype_name(dt);
  }
  EXPECT_EQ(kernels::sum_of_squares(test::zeros({0}, DType::kF32)), 0.0);
  EXPECT_THROW(kernels::sum_of_squares(test::zeros({3}, DType::kI32)), Error);
}

}  // namespace
}  // namespace kiri
