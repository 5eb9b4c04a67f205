// Selective recomputation (model/layers.h): each module, and all together, gives the loss and
// every gradient bitwise equal to no recomputation, and the activations a training forward
// keeps for backward drop by exactly the bytes of the tensors the modules do not keep,
// computed here from the shapes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "gemm_lowp_paths.h"
#include "kiri/base/rng.h"
#include "kiri/model/gpt.h"
#include "kiri/nn/parameter_store.h"

namespace kiri::model {
namespace {

namespace test = ::kiri::test;

struct Outcome {
  double loss = 0;
  std::vector<float> grads;
  int64_t kept = 0;  // activation bytes live between forward and backward
  int64_t peak = 0;  // the activations' peak over forward and backward
};

constexpr int64_t kB = 4, kT = 32;

Outcome train_once(const GPTConfig& c, const SelectiveRecompute& r, DType dtype) {
  Allocator alloc;
  GPT<float> m(c);
  m.set_selective_recompute(r);
  nn::ParameterStore store(m.parameters(), dtype, alloc);
  for (nn::Parameter* p : m.parameters()) {
    Tensor w = Tensor::empty(p->shape, DType::kF32, Category::kOther, alloc);
    nn::init_values(w, p->init, 5, p->name);
    p->value.copy_from(w);
  }
  Tensor x = Tensor::empty({kB, kT}, DType::kI32, Category::kOther, alloc);
  Tensor y = Tensor::empty({kB, kT}, DType::kI32, Category::kOther, alloc);
  Rng rng(3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(c.vocab_size));
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(c.vocab_size));
  }
  nn::Context ctx{alloc};
  alloc.reset_peaks();
  Outcome o;
  o.loss = m.forward(ctx, x, y, 1.0 / double(kB * kT));
  o.kept = alloc.stats().of(Category::kActivations);
  m.backward(ctx);
  o.peak = alloc.stats().peak_of(Category::kActivations);
  Tensor g = Tensor::empty({store.numel()}, DType::kF32, Category::kOther, alloc);
  g.copy_from(store.grads());
  o.grads.assign(g.data<float>(), g.data<float>() + g.numel());
  return o;
}

GPTConfig gpt2_config() {
  GPTConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.vocab_size = 64;
  c.block_size = 32;
  return c;
}

// Grouped-query attention (2 key/value heads for 4 query heads), SwiGLU of 80, untied head.
GPTConfig llama_config() {
  GPTConfig c = gpt2_config();
  c.arch = Arch::kLlama;
  c.n_head = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 80;
  c.tie_word_embeddings = false;
  return c;
}

struct Case {
  std::string name;
  SelectiveRecompute r;
};
std::vector<Case> cases() {
  return {{"core_attn", {.core_attn = true}},
          {"layernorm", {.layernorm = true}},
          {"mlp_act", {.mlp_act = true}},
          {"all", {.core_attn = true, .layernorm = true, .mlp_act = true}}};
}

// The bytes one block no longer keeps, from the shapes (N = B T rows, C channels, H query
// heads, F the MLP's width). fp32: the core's output att is also its output projection's
// input, which keeps it, so core_attn frees only lse [B, H, T]; the norms' outputs are the
// column-parallel regions' inputs X_region [N, C]; the MLP activation's output [N, F] is the
// down projection's input. Mixed precision: the projections keep 16-bit copies (2 bytes) of
// their inputs, and the core's fp32 att [N, C] is its own.
int64_t dropped_per_block(const GPTConfig& c, const SelectiveRecompute& r, DType dtype) {
  const int64_t n = kB * kT, ch = c.n_embd, h = c.n_head;
  const int64_t f = c.llama() ? c.intermediate_size : 4 * ch;
  const int64_t in_bytes = dtype == DType::kF32 ? 4 : 2;  // what the GEMMs keep
  int64_t d = 0;
  if (r.core_attn) d += 4 * kB * h * kT + (dtype == DType::kF32 ? 0 : 4 * n * ch);
  if (r.layernorm) d += 2 * n * ch * in_bytes;
  if (r.mlp_act) d += n * f * in_bytes;
  return d;
}

void expect_bitwise(DType d) {
  for (const GPTConfig& c : {gpt2_config(), llama_config()}) {
    const char* arch = c.llama() ? "llama" : "gpt2";
    const Outcome plain = train_once(c, {}, d);
    for (const Case& k : cases()) {
      const Outcome s = train_once(c, k.r, d);
      const std::string what = k.name + " " + dtype_name(d) + " " + arch;
      EXPECT_EQ(plain.loss, s.loss) << what;
      ASSERT_EQ(plain.grads.size(), s.grads.size());
      EXPECT_EQ(0, std::memcmp(plain.grads.data(), s.grads.data(), 4 * plain.grads.size())) << what;
    }
  }
}

TEST(SelectiveRecompute, SameLossAndGradientsBitwise) {
  expect_bitwise(DType::kF32);
}

// bf16 through each gemm_lowp path: the recomputed GEMM inputs are converted again.
class SelectiveRecomputeLowp : public ::testing::TestWithParam<kernels::LowpGemmImpl> {};
TEST_P(SelectiveRecomputeLowp, SameLossAndGradientsBitwiseBf16) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  expect_bitwise(DType::kBF16);
}
INSTANTIATE_TEST_SUITE_P(SelectiveRecompute, SelectiveRecomputeLowp, test::kGemmLowpPaths,
                         test::gemm_lowp_path_name);

void expect_bytes(DType d) {
  for (const GPTConfig& c : {gpt2_config(), llama_config()}) {
    const char* arch = c.llama() ? "llama" : "gpt2";
    const Outcome plain = train_once(c, {}, d);
    for (const Case& k : cases()) {
      const Outcome s = train_once(c, k.r, d);
      const int64_t drop = c.n_layer * dropped_per_block(c, k.r, d);
      const std::string what = k.name + " " + dtype_name(d) + " " + arch;
      std::printf("%s: kept %lld -> %lld bytes (-%lld), peak %lld -> %lld\n", what.c_str(),
                  static_cast<long long>(plain.kept), static_cast<long long>(s.kept),
                  static_cast<long long>(drop), static_cast<long long>(plain.peak),
                  static_cast<long long>(s.peak));
      EXPECT_GT(drop, 0) << what;
      EXPECT_EQ(plain.kept - s.kept, drop) << what;
    }
  }
}

TEST(SelectiveRecompute, KeptActivationsDropByTheDroppedTensors) {
  expect_bytes(DType::kF32);
}
TEST(SelectiveRecompute, KeptActivationsDropByTheDroppedTensorsBf16) {
  expect_bytes(DType::kBF16);
}

}  // namespace
}  // namespace kiri::model
