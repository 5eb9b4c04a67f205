// The float kernels (oneDNN sgemm, the fast exp, float row statistics) agree
// with the double ones on the same inputs, at sizes that exercise the vector
// loops' remainders and attention's several row blocks.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <map>
#include <string>

#include "kernels/test_util.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

constexpr int64_t B = 2, T = 70, C = 48, NH = 3, IC = 67, OC = 35, V = 1000, VE = 50;

struct Inputs {
  std::map<std::string, Tensor> t;  // double
  Inputs() {
    t["x"] = randn({B, T, IC}, 1, 2.0);
    t["w"] = randn({IC, OC}, 2, 0.3);
    t["b"] = randn({OC}, 3);
    t["g_oc"] = randn({B, T, OC}, 4);
    t["ln_w"] = randn({IC}, 5);
    t["ln_b"] = randn({IC}, 6);
    t["g_ic"] = randn({B, T, IC}, 7);
    t["qkv"] = randn({B, T, 3 * C}, 8);
    t["g_c"] = randn({B, T, C}, 9);
    t["logits"] = randn({B * T, V}, 10, 4.0);
    t["dloss"] = randn({B * T}, 11);
    t["wte"] = randn({VE, C}, 12);
    t["wpe"] = randn({T, C}, 13);
    // Llama's: grouped-query attention (4 query heads of 12, 2 key/value heads), SwiGLU,
    // nn.Linear's [out, in] weight.
    t["q"] = randn({B, T, C}, 14);
    t["k"] = randn({B, T, C / 2}, 15);
    t["v"] = randn({B, T, C / 2}, 16);
    t["up"] = randn({B, T, IC}, 17);
    t["w_nt"] = randn({OC, IC}, 18, 0.3);
  }
};

Tensor tokens() {
  Tensor tok = test::empty({B, T}, DType::kI32);
  for (int64_t i = 0; i < B * T; ++i) tok.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % VE);
  tok.data<int32_t>()[5] = -1;  // for the cross-entropy: ignored
  return tok;
}

// The Llama ops of run_ops, into r.
template <typename Tp>
void run_llama_ops(std::map<std::string, Tensor>& x, std::map<std::string, Tensor>& r) {
  const DType dt = dtype_of<Tp>();
  auto z = [&](const Shape& s) { return test::zeros(s, dt); };
  r["rms"] = z({B, T, IC}), r["rms_rstd"] = z({B, T});
  kernels::rmsnorm_forward<Tp>(r["rms"], r["rms_rstd"], x["x"], x["ln_w"], 1e-6);
  r["rms_dinp"] = z({B, T, IC}), r["rms_dw"] = z({IC});
  kernels::rmsnorm_backward<Tp>(r["rms_dinp"], r["rms_dw"], x["g_ic"], x["x"], x["ln_w"],
                                r["rms_rstd"]);
  r["swiglu"] = z({B, T, IC}), r["swiglu_dgate"] = z({B, T, IC}), r["swiglu_dup"] = z({B, T, IC});
  kernels::swiglu_forward<Tp>(r["swiglu"], x["x"], x["up"]);
  kernels::swiglu_backward<Tp>(r["swiglu_dgate"], r["swiglu_dup"], x["x"], x["up"], x["g_ic"]);
  for (const bool llama3 : {false, true}) {
    kernels::RopeParams p;
    p.llama3 = llama3;
    p.original_max_position_embeddings = 32;
    Tensor cs = z({T, C / NH / 2}), sn = z({T, C / NH / 2});
    kernels::rope_table<Tp>(cs, sn, kernels::rope_inv_freq(C / NH, p));
    const std::string name = llama3 ? "rope_llama3" : "rope";
    r[name] = z({B, T, C}), r[name + "_dinp"] = z({B, T, C});
    kernels::rope_forward<Tp>(r[name], x["g_c"], cs, sn);
    kernels::rope_backward<Tp>(r[name + "_dinp"], x["g_c"], cs, sn);
  }
  constexpr int kHeads = 4, kKvHeads = 2;
  Tensor scratch = z({kernels::attention_scratch_numel(T, omp_get_max_threads())});
  r["gqa"] = z({B, T, C}), r["gqa_lse"] = z({B, kHeads, T});
  kernels::gqa_attention_forward<Tp>(r["gqa"], r["gqa_lse"], x["q"], x["k"], x["v"], kHeads,
                                     kKvHeads, scratch);
  r["gqa_dq"] = z({B, T, C}), r["gqa_dk"] = z({B, T, C / 2}), r["gqa_dv"] = z({B, T, C / 2});
  kernels::gqa_attention_backward<Tp>(r["gqa_dq"], r["gqa_dk"], r["gqa_dv"], x["g_c"], x["q"],
                                      x["k"], x["v"], r["gqa"], r["gqa_lse"], kHeads, kKvHeads,
                                      scratch);
  r["linear_nt"] = z({B, T, OC}), r["linear_nt_dinp"] = z({B, T, IC});
  r["linear_nt_dw"] = z({OC, IC});
  kernels::linear_nt_forward<Tp>(r["linear_nt"], x["x"], x["w_nt"]);
  kernels::linear_nt_backward<Tp>(r["linear_nt_dinp"], r["linear_nt_dw"], x["g_oc"], x["x"],
                                  x["w_nt"]);
}

// Runs every op in T's precision; returns the results (outputs and gradients).
template <typename Tp>
std::map<std::string, Tensor> run_ops(const Inputs& in) {
  const DType dt = dtype_of<Tp>();
  std::map<std::string, Tensor> x, r;
  for (const auto& [name, t] : in.t) x[name] = test::convert(t, dt);
  auto z = [&](const Shape& s) { return test::zeros(s, dt); };
  // linear
  r["linear"] = z({B, T, OC});
  kernels::linear_forward<Tp>(r["linear"], x["x"], x["w"], x["b"]);
  r["linear_dinp"] = z({B, T, IC}), r["linear_dw"] = z({IC, OC}), r["linear_db"] = z({OC});
  kernels::linear_backward<Tp>(r["linear_dinp"], r["linear_dw"], r["linear_db"], x["g_oc"], x["x"],
                               x["w"]);
  // layernorm
  r["ln"] = z({B, T, IC}), r["ln_mean"] = z({B, T}), r["ln_rstd"] = z({B, T});
  kernels::layernorm_forward<Tp>(r["ln"], r["ln_mean"], r["ln_rstd"], x["x"], x["ln_w"], x["ln_b"]);
  r["ln_dinp"] = z({B, T, IC}), r["ln_dw"] = z({IC}), r["ln_db"] = z({IC});
  kernels::layernorm_backward<Tp>(r["ln_dinp"], r["ln_dw"], r["ln_db"], x["g_ic"], x["x"],
                                  x["ln_w"], r["ln_mean"], r["ln_rstd"]);
  // gelu
  r["gelu"] = z({B, T, IC}), r["gelu_dinp"] = z({B, T, IC});
  kernels::gelu_forward<Tp>(r["gelu"], x["x"]);
  kernels::gelu_backward<Tp>(r["gelu_dinp"], x["x"], x["g_ic"]);
  // attention
  Tensor scratch = z({kernels::attention_scratch_numel(T, omp_get_max_threads())});
  r["attn"] = z({B, T, C}), r["attn_lse"] = z({B, NH, T}), r["attn_dqkv"] = z({B, T, 3 * C});
  kernels::attention_forward<Tp>(r["attn"], r["attn_lse"], x["qkv"], NH, scratch);
  kernels::attention_backward<Tp>(r["attn_dqkv"], x["g_c"], x["qkv"], r["attn"], r["attn_lse"], NH,
                                  scratch);
  // softmax + cross-entropy
  const Tensor tok = tokens();
  const Tensor targets = tok.view({B * T});
  r["xent"] = z({B * T}), r["xent_lse"] = z({B * T});
  kernels::softmax_xent_forward<Tp>(r["xent"], r["xent_lse"], x["logits"], targets);
  r["xent_dlogits"] = test::clone(x["logits"]);
  kernels::softmax_xent_backward<Tp>(r["xent_dlogits"], r["xent_lse"], targets, x["dloss"]);
  // embedding (the ignored target doubles as token 0 here)
  Tensor tok0 = test::clone(tok);
  tok0.data<int32_t>()[5] = 0;
  r["emb"] = z({B, T, C}), r["emb_dwte"] = z({VE, C}), r["emb_dwpe"] = z({T, C});
  kernels::embedding_forward<Tp>(r["emb"], tok0, x["wte"], x["wpe"]);
  kernels::embedding_backward<Tp>(r["emb_dwte"], r["emb_dwpe"], x["g_c"], tok0);
  run_llama_ops<Tp>(x, r);
  // residual
  r["res"] = z({B, T, C}), r["res_da"] = z({B, T, C}), r["res_db"] = z({B, T, C});
  kernels::residual_forward<Tp>(r["res"], x["g_c"], r["emb"]);
  kernels::residual_backward<Tp>(r["res_da"], r["res_db"], x["g_c"]);
  return r;
}

TEST(FloatVsDouble, AllOpsAgree) {
  const Inputs in;
  auto f = run_ops<float>(in);
  auto d = run_ops<double>(in);
  ASSERT_EQ(f.size(), d.size());
  for (const auto& [name, ref] : d) {
    const double err = test::max_rel_diff(f[name], ref);
    EXPECT_LT(err, 1e-5) << name;
    ::testing::Test::RecordProperty(name, testing::PrintToString(err));
  }
}

// Deterministic: the same inputs give bitwise the same results (static
// schedules, no float atomics, fixed reduction orders).
TEST(FloatKernels, RepeatBitwise) {
  const Inputs in;
  auto first = run_ops<float>(in);
  auto second = run_ops<float>(in);
  for (const auto& [name, t] : first) {
    ASSERT_EQ(t.nbytes(), second[name].nbytes()) << name;
    EXPECT_EQ(std::memcmp(t.raw(), second[name].raw(), t.nbytes()), 0) << name;
  }
}

}  // namespace
}  // namespace kiri
