// The Llama kernels: RMSNorm, SwiGLU, rotary embedding (with and without Llama 3's
// scaling), grouped-query attention (MHA, GQA, MQA), nn.Linear-layout projections and the
// token-only embedding: their forward against the formula, their gradients against
// central finite differences in double.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numbers>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

namespace k = kernels;
using test::randn;

TEST(RmsNorm, ForwardScalesByTheRootMeanSquare) {
  const int64_t N = 4, C = 7;
  Tensor x = randn({N, C}, 1, 3.0), w = randn({C}, 2);
  Tensor out = test::empty({N, C}), rstd = test::empty({N});
  k::rmsnorm_forward<double>(out, rstd, x, w, 1e-6);
  for (int64_t i = 0; i < N; ++i) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += x.item(i * C + c) * x.item(i * C + c) / C;
    const double r = 1 / std::sqrt(ms + 1e-6);
    EXPECT_NEAR(rstd.item(i), r, 1e-12);
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(out.item(i * C + c), x.item(i * C + c) * r * w.item(c), 1e-12);
  }
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  const int64_t B = 2, T = 3, C = 7;
  Tensor x = randn({B, T, C}, 1, 2.0), w = randn({C}, 2);
  Tensor out = test::empty({B, T, C}), rstd = test::empty({B, T});
  const Tensor R = randn({B, T, C}, 4);
  auto loss = [&] {
    k::rmsnorm_forward<double>(out, rstd, x, w, 1e-5);
    return test::dot(out, R);
  };
  loss();
  Tensor dx = randn(x.shape(), 5), dw = randn(w.shape(), 6);
  const Tensor dx0 = test::clone(dx), dw0 = test::clone(dw);
  k::rmsnorm_backward<double>(dx, dw, R, x, w, rstd);
  test::expect_grad_matches_fd(x, test::minus(dx, dx0), loss, "dinp");
  test::expect_grad_matches_fd(w, test::minus(dw, dw0), loss, "dweight");
}

TEST(RmsNorm, RejectsAMismatchedWeight) {
  Tensor x = randn({4, 7}, 1), w = randn({6}, 2);
  Tensor out = test::empty({4, 7}), rstd = test::empty({4});
  try {
    k::rmsnorm_forward<double>(out, rstd, x, w, 1e-6);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rmsnorm_forward: weight has shape [6]"),
              std::string::npos)
        << e.what();
  }
}

TEST(SwiGlu, ForwardIsSiluOfTheGateTimesUp) {
  const Tensor g = randn({3, 5}, 1, 3.0), u = randn({3, 5}, 2);
  Tensor out = test::empty({3, 5});
  k::swiglu_forward<double>(out, g, u);
  for (int64_t i = 0; i < 15; ++i)
    EXPECT_NEAR(out.item(i), g.item(i) / (1 + std::exp(-g.item(i))) * u.item(i), 1e-14);
}

TEST(SwiGlu, GradientsMatchFiniteDifferences) {
  Tensor g = randn({2, 3, 6}, 1, 3.0), u = randn({2, 3, 6}, 2);
  Tensor out = test::empty(g.shape());
  const Tensor R = randn(g.shape(), 3);
  auto loss = [&] {
    k::swiglu_forward<double>(out, g, u);
    return test::dot(out, R);
  };
  Tensor dg = randn(g.shape(), 4), du = randn(u.shape(), 5);
  const Tensor dg0 = test::clone(dg), du0 = test::clone(du);
  k::swiglu_backward<double>(dg, du, g, u, R);
  test::expect_grad_matches_fd(g, test::minus(dg, dg0), loss, "dgate");
  test::expect_grad_matches_fd(u, test::minus(du, du0), loss, "dup");
}

k::RopeParams llama3_params() {
  k::RopeParams p;
  p.theta = 500000;
  p.llama3 = true;
  p.factor = 8;
  p.low_freq_factor = 1;
  p.high_freq_factor = 4;
  p.original_max_position_embeddings = 64;  // small, so that a 16-wide head has all three bands
  return p;
}

TEST(Rope, InvFreqIsThetaToTheMinusTwoIOverD) {
  const std::vector<double> f = k::rope_inv_freq(8, {});
  ASSERT_EQ(f.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(f[i], 1 / std::pow(10000.0, 2.0 * i / 8));
}

// Llama 3's three bands, as transformers' _compute_llama3_parameters puts them: wavelengths
// below old_len / high_freq_factor kept, above old_len / low_freq_factor divided by factor,
// between interpolated by (old_len / wavelength - low) / (high - low).
TEST(Rope, Llama3ScalingKeepsHighSlowsLowAndInterpolatesBetween) {
  const k::RopeParams p = llama3_params();
  k::RopeParams plain = p;
  plain.llama3 = false;
  const std::vector<double> base = k::rope_inv_freq(16, plain), f = k::rope_inv_freq(16, p);
  int kept = 0, slowed = 0, between = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    if (wavelen < 64.0 / 4) {
      EXPECT_DOUBLE_EQ(f[i], base[i]) << i;
      ++kept;
    } else if (wavelen > 64.0 / 1) {
      EXPECT_DOUBLE_EQ(f[i], base[i] / 8) << i;
      ++slowed;
    } else {
      const double s = (64.0 / wavelen - 1) / (4 - 1);
      EXPECT_NEAR(f[i], (1 - s) * base[i] / 8 + s * base[i], 1e-15) << i;
      EXPECT_LT(f[i], base[i]);
      EXPECT_GT(f[i], base[i] / 8);
      ++between;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(slowed, 0);
  EXPECT_GT(between, 0);
}

// The rotate-half pairing: column i with column i + hs/2 of the same head, turned by
// position * inv_freq[i]; every head of a row alike.
TEST(Rope, ForwardTurnsColumnIWithColumnIPlusHalf) {
  const int64_t B = 2, T = 5, H = 3, hs = 8, h = hs / 2;
  const std::vector<double> inv = k::rope_inv_freq(hs, {});
  Tensor cs = test::empty({T, h}), sn = test::empty({T, h});
  k::rope_table<double>(cs, sn, inv);
  const Tensor x = randn({B, T, H * hs}, 1);
  Tensor out = test::empty(x.shape());
  k::rope_forward<double>(out, x, cs, sn);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hd = 0; hd < H; ++hd)
        for (int64_t i = 0; i < h; ++i) {
          const int64_t at = (b * T + t) * H * hs + hd * hs + i;
          const double a = t * inv[i], x1 = x.item(at), x2 = x.item(at + h);
          EXPECT_NEAR(out.item(at), x1 * std::cos(a) - x2 * std::sin(a), 1e-14);
          EXPECT_NEAR(out.item(at + h), x2 * std::cos(a) + x1 * std::sin(a), 1e-14);
        }
  // In place gives the same.
  Tensor y = test::clone(x);
  k::rope_forward<double>(y, y, cs, sn);
  EXPECT_EQ(test::max_rel_diff(y, out), 0);
}

void expect_rope_gradient(const k::RopeParams& p) {
  const int64_t B = 2, T = 6, H = 2, hs = 16;
  Tensor cs = test::empty({8, hs / 2}), sn = test::empty({8, hs / 2});  // a longer table
  k::rope_table<double>(cs, sn, k::rope_inv_freq(hs, p));
  Tensor x = randn({B, T, H * hs}, 1);
  Tensor out = test::empty(x.shape());
  const Tensor R = randn(x.shape(), 2);
  auto loss = [&] {
    k::rope_forward<double>(out, x, cs, sn);
    return test::dot(out, R);
  };
  Tensor dx = randn(x.shape(), 3);
  const Tensor dx0 = test::clone(dx);
  k::rope_backward<double>(dx, R, cs, sn);
  test::expect_grad_matches_fd(x, test::minus(dx, dx0), loss, "dinp");
}

TEST(Rope, GradientMatchesFiniteDifferences) {
  expect_rope_gradient({});
}
TEST(Rope, GradientWithLlama3ScalingMatchesFiniteDifferences) {
  expect_rope_gradient(llama3_params());
}

TEST(Rope, RefusesAnOddHeadAndATooShortTable) {
  EXPECT_THROW(k::rope_inv_freq(7, {}), Error);
  Tensor cs = test::empty({3, 4}), sn = test::empty({3, 4});
  k::rope_table<double>(cs, sn, k::rope_inv_freq(8, {}));
  const Tensor x = randn({1, 5, 8}, 1);
  Tensor out = test::empty(x.shape());
  try {
    k::rope_forward<double>(out, x, cs, sn);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("5 positions but the table has 3"), std::string::npos)
        << e.what();
  }
}

// Grouped-query attention with NH query heads and NKV key/value heads of hs.
struct Gqa {
  int64_t B = 2, T = 7, NH = 4, NKV = 2, hs = 4;
  Tensor q, key, value, out, lse, scratch;
  explicit Gqa(int64_t nkv) : NKV(nkv) {
    q = randn({B, T, NH * hs}, 1), key = randn({B, T, NKV * hs}, 2);
    value = randn({B, T, NKV * hs}, 3);
    out = test::empty({B, T, NH * hs}), lse = test::empty({B, NH, T});
    scratch = test::empty({k::attention_scratch_numel(T, omp_get_max_threads())});
  }
  void forward() {
    k::gqa_attention_forward<double>(out, lse, q, key, value, static_cast<int>(NH),
                                     static_cast<int>(NKV), scratch);
  }
};

// Each query head attends with key/value head h / (NH / NKV): as multi-head attention on
// the key/value heads repeated (Hugging Face's repeat_kv), which the fused kernel computes.
TEST(GqaAttention, EqualsMultiHeadOnRepeatedKeyValueHeads) {
  for (int64_t nkv : {4, 2, 1}) {
    Gqa g(nkv);
    g.forward();
    const int64_t C = g.NH * g.hs, rep = g.NH / nkv;
    Tensor qkv = test::empty({g.B, g.T, 3 * C});
    for (int64_t r = 0; r < g.B * g.T; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t kc = (c / g.hs / rep) * g.hs + c % g.hs;  // the repeated k/v column
        qkv.data<double>()[r * 3 * C + c] = g.q.item(r * C + c);
        qkv.data<double>()[r * 3 * C + C + c] = g.key.item(r * nkv * g.hs + kc);
        qkv.data<double>()[r * 3 * C + 2 * C + c] = g.value.item(r * nkv * g.hs + kc);
      }
    Tensor out = test::empty({g.B, g.T, C}), lse = test::empty({g.B, g.NH, g.T});
    k::attention_forward<double>(out, lse, qkv, static_cast<int>(g.NH), g.scratch);
    EXPECT_LT(test::max_rel_diff(g.out, out), 1e-14) << "NKV " << nkv;
    EXPECT_LT(test::max_rel_diff(g.lse, lse), 1e-14) << "NKV " << nkv;
  }
}

// Multi-head (NKV = NH), grouped (2 query heads per key/value head) and multi-query (one).
class GqaGradient : public ::testing::TestWithParam<int64_t> {};

TEST_P(GqaGradient, MatchesFiniteDifferences) {
  Gqa g(GetParam());
  const Tensor R = randn(g.out.shape(), 4);
  auto loss = [&] {
    g.forward();
    return test::dot(g.out, R);
  };
  loss();
  Tensor dq = randn(g.q.shape(), 5), dk = randn(g.key.shape(), 6);
  Tensor dv = randn(g.value.shape(), 7);
  const Tensor dq0 = test::clone(dq), dk0 = test::clone(dk), dv0 = test::clone(dv);
  k::gqa_attention_backward<double>(dq, dk, dv, R, g.q, g.key, g.value, g.out, g.lse,
                                    static_cast<int>(g.NH), static_cast<int>(g.NKV), g.scratch);
  test::expect_grad_matches_fd(g.q, test::minus(dq, dq0), loss, "dq");
  test::expect_grad_matches_fd(g.key, test::minus(dk, dk0), loss, "dk");
  test::expect_grad_matches_fd(g.value, test::minus(dv, dv0), loss, "dv");
}
INSTANTIATE_TEST_SUITE_P(Heads, GqaGradient, ::testing::Values(4, 2, 1), [](const auto& info) {
  return info.param == 4 ? std::string("MHA") : info.param == 1 ? "MQA" : "GQA";
});

TEST(GqaAttention, RefusesKeyValueHeadsThatDoNotDivide) {
  Gqa g(2);
  try {
    k::gqa_attention_forward<double>(g.out, g.lse, g.q, g.key, g.value, 4, 3, g.scratch);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_head 3 dividing n_head 4"), std::string::npos)
        << e.what();
  }
}

// weight [out, in]: the same product as the Conv1D layout's [in, out] transposed.
TEST(LinearNt, EqualsTheTransposedConv1DLayoutAndMatchesFiniteDifferences) {
  const int64_t N = 5, IC = 6, OC = 4;
  Tensor x = randn({N, IC}, 1), w = randn({OC, IC}, 2);
  Tensor wt = test::empty({IC, OC});
  for (int64_t o = 0; o < OC; ++o)
    for (int64_t i = 0; i < IC; ++i) wt.data<double>()[i * OC + o] = w.item(o * IC + i);
  Tensor out = test::empty({N, OC}), ref = test::empty({N, OC});
  k::linear_nt_forward<double>(out, x, w);
  k::linear_forward<double>(ref, x, wt, Tensor());
  EXPECT_LT(test::max_rel_diff(out, ref), 1e-14);
  const Tensor R = randn({N, OC}, 3);
  auto loss = [&] {
    k::linear_nt_forward<double>(out, x, w);
    return test::dot(out, R);
  };
  Tensor dx = randn(x.shape(), 4), dw = randn(w.shape(), 5);
  const Tensor dx0 = test::clone(dx), dw0 = test::clone(dw);
  k::linear_nt_backward<double>(dx, dw, R, x, w);
  test::expect_grad_matches_fd(x, test::minus(dx, dx0), loss, "dinp");
  test::expect_grad_matches_fd(w, test::minus(dw, dw0), loss, "dweight");
}

TEST(TokenEmbedding, ForwardCopiesTheTokensRows) {
  const Tensor wte = randn({9, 4}, 1);
  Tensor tok = test::empty({2, 3}, DType::kI32);
  for (int64_t i = 0; i < 6; ++i) tok.data<int32_t>()[i] = static_cast<int32_t>((i * 5) % 9);
  Tensor out = test::empty({2, 3, 4});
  k::token_embedding_forward<double>(out, tok, wte);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(out.item(i * 4 + c), wte.item(tok.data<int32_t>()[i] * 4 + c));
  tok.data<int32_t>()[2] = 9;
  EXPECT_THROW(k::token_embedding_forward<double>(out, tok, wte), Error);
}

}  // namespace
}  // namespace kiri
