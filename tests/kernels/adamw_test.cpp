#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

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

// The gradient's zeroing fused into the update (AdamWParams::zero_grad) is the update and
// then the zeroing: param, m, v and the 16-bit copy bitwise, the gradient all zeros, for
// every gradient dtype, on one thread and on two, over several chunks and a ragged tail.
TEST(AdamW, FusedZeroGradEqualsUpdateThenZeroingBitwise) {
  const int64_t n = 3 * 16384 + 77;  // above the parallel threshold
  const int threads = omp_get_max_threads();
  for (DType gd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int th : {1, 2}) {
      omp_set_num_threads(th);
      const bool lowp = gd != DType::kF32;
      Tensor p1 = randn({n}, 1, 0.02, DType::kF32), m1 = randn({n}, 2, 1e-3, DType::kF32);
      Tensor v1 = randn({n}, 3, 1e-3, DType::kF32);
      for (int64_t i = 0; i < n; ++i) v1.data<float>()[i] *= v1.data<float>()[i];  // >= 0
      Tensor g1 = randn({n}, 4, 1e-2, gd);
      Tensor w1 = test::zeros({lowp ? n : 1}, lowp ? gd : DType::kBF16);
      Tensor p2 = test::clone(p1), m2 = test::clone(m1), v2 = test::clone(v1);
      Tensor g2 = test::clone(g1), w2 = test::clone(w1);
      kernels::AdamWParams hp;
      hp.lr = 1e-3f, hp.weight_decay = 0.1f, hp.grad_scale = 0.7f, hp.step = 3;
      kernels::adamw_update(p1, g1, m1, v1, hp, lowp ? &w1 : nullptr);
      g1.zero_();
      hp.zero_grad = true;
      kernels::adamw_update(p2, g2, m2, v2, hp, lowp ? &w2 : nullptr);
      const std::string what = std::string(dtype_name(gd)) + " on " + std::to_string(th);
      EXPECT_EQ(std::memcmp(p1.raw(), p2.raw(), p1.nbytes()), 0) << "param, " << what;
      EXPECT_EQ(std::memcmp(m1.raw(), m2.raw(), m1.nbytes()), 0) << "m, " << what;
      EXPECT_EQ(std::memcmp(v1.raw(), v2.raw(), v1.nbytes()), 0) << "v, " << what;
      EXPECT_EQ(std::memcmp(w1.raw(), w2.raw(), w1.nbytes()), 0) << "16-bit param, " << what;
      EXPECT_EQ(std::memcmp(g1.raw(), g2.raw(), g1.nbytes()), 0) << "gradient, " << what;
      EXPECT_EQ(kernels::sum_of_squares(g2), 0.0) << what;
      // The update did something: the comparison is not of two untouched tensors.
      EXPECT_NE(std::memcmp(p1.raw(), randn({n}, 1, 0.02, DType::kF32).raw(), p1.nbytes()), 0);
    }
  }
  omp_set_num_threads(threads);
}

// The sum of squares as the kernel computed it before it took four chunks at once: one
// chain of adds per chunk of 2^16 elements, the partial sums added in order. The kernel's
// grouped loop keeps each chunk's lanes and order, so its result is this one to the bit.
template <typename T>
double chunked_sum_of_squares(const T* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  double total = 0;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    double acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * x[i];
    total += acc;
  }
  return total;
}

TEST(SumOfSquares, FourChunksAtOnceEqualOneChunkAtATimeBitwise) {
  const int threads = omp_get_max_threads();
  const int64_t chunk = 1 << 16;
  // Whole groups of four, a group and a part, fewer than four, ragged tails.
  for (int64_t n : {4 * chunk, 8 * chunk, 9 * chunk + 123, 5 * chunk - 1, 3 * chunk + 7, chunk}) {
    for (DType dt : {DType::kF32, DType::kF64}) {
      Tensor x = randn({n}, 5, 1.0, dt);
      const double ref = dt == DType::kF32 ? chunked_sum_of_squares(x.data<float>(), n)
                                           : chunked_sum_of_squares(x.data<double>(), n);
      for (int th : {1, 2}) {
        omp_set_num_threads(th);
        const double got = kernels::sum_of_squares(x);
        EXPECT_EQ(std::memcmp(&got, &ref, sizeof got), 0)
            << dtype_name(dt) << " n " << n << " on " << th << ": " << got << " vs " << ref;
      }
    }
  }
  omp_set_num_threads(threads);
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
