#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

Tensor make_scratch(int64_t T, DType dtype = DType::kF64) {
  return test::empty({kernels::attention_scratch_numel(T, omp_get_max_threads())}, dtype);
}

// Naive causal attention in double: out [B,T,C] and lse [B,NH,T].
void attention_ref(const Tensor& qkv, int NH, std::vector<double>& out, std::vector<double>& lse) {
  const int64_t B = qkv.dim(0), T = qkv.dim(1), C = qkv.dim(2) / 3, hs = C / NH;
  const double* x = qkv.data<double>();
  out.assign(B * T * C, 0.0);
  lse.assign(B * NH * T, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double* q = x + (b * T + i) * 3 * C + h * hs;
        std::vector<double> s(i + 1);
        double m = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = x + (b * T + j) * 3 * C + C + h * hs;
          s[j] = 0;
          for (int64_t c = 0; c < hs; ++c) s[j] += q[c] * k[c] / std::sqrt(double(hs));
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - m);
        lse[(b * NH + h) * T + i] = m + std::log(sum);
        for (int64_t j = 0; j <= i; ++j) {
          const double* v = x + (b * T + j) * 3 * C + 2 * C + h * hs;
          for (int64_t c = 0; c < hs; ++c)
            out[(b * T + i) * C + h * hs + c] += std::exp(s[j] - m) / sum * v[c];
        }
      }
}

void check_attention(int64_t B, int64_t T, int64_t C, int NH, double h = 1e-6) {
  SCOPED_TRACE(testing::Message() << "B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
  Tensor qkv = randn({B, T, 3 * C}, 1), R = randn({B, T, C}, 2);
  Tensor out = test::empty({B, T, C}), lse = test::empty({B, NH, T}), scratch = make_scratch(T);
  auto loss = [&] {
    kernels::attention_forward<double>(out, lse, qkv, NH, scratch);
    return test::dot(out, R);
  };
  loss();
  std::vector<double> out_ref, lse_ref;
  attention_ref(qkv, NH, out_ref, lse_ref);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_NEAR(out.item(i), out_ref[i], 1e-12) << i;
  for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_NEAR(lse.item(i), lse_ref[i], 1e-12) << i;
  Tensor dqkv = randn(qkv.shape(), 3), dqkv0 = test::clone(dqkv);
  kernels::attention_backward<double>(dqkv, R, qkv, out, lse, NH, scratch);
  test::expect_grad_matches_fd(qkv, test::minus(dqkv, dqkv0), loss, "dqkv", 1e-6, h);
}

TEST(Attention, GradientsMatchFiniteDifferences) {
  check_attention(2, 5, 8, 2);
}
TEST(Attention, SingleToken) {
  check_attention(2, 1, 8, 2);
}
// Longer than one 64-query row block. The loss sums more terms, so a larger
// step keeps its rounding error (~eps |L| / h) well under the tolerance.
TEST(Attention, SeveralRowBlocks) {
  check_attention(1, 67, 4, 2, 1e-5);
}

TEST(Attention, RejectsBadArguments) {
  Tensor qkv = randn({1, 4, 12}, 1), out = test::empty({1, 4, 4});
  Tensor lse = test::empty({1, 3, 4}), scratch = make_scratch(4);
  EXPECT_THROW(kernels::attention_forward<double>(out, lse, qkv, 3, scratch), Error);  // 3 ∤ 4
  Tensor lse2 = test::empty({1, 2, 4}), small = test::empty({1});
  EXPECT_THROW(kernels::attention_forward<double>(out, lse2, qkv, 2, small), Error);
  Tensor bad_out = test::empty({1, 4, 5});
  EXPECT_THROW(kernels::attention_forward<double>(bad_out, lse2, qkv, 2, scratch), Error);
}

}  // namespace
}  // namespace kiri
