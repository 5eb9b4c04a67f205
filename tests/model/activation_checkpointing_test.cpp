// Activation checkpointing: a checkpointed block keeps only its input in
// forward and recomputes its activations in backward, so the loss and every
// gradient are bitwise those of the plain model, while the activations'
// peak drops by about (checkpointed blocks - 1) x what a block saves.
#include <gtest/gtest.h>

#include <cstring>

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
  int64_t activations_peak = 0;
};

Outcome train_once(const GPTConfig& c, int every_k, DType dtype, int64_t b, int64_t t) {
  Allocator alloc;
  GPT<float> m(c);
  m.set_activation_checkpointing(every_k);
  nn::ParameterStore store(m.parameters(), dtype, alloc);
  // Initialise in fp32, then round into the store (16-bit stores too).
  for (nn::Parameter* p : m.parameters()) {
    Tensor w = Tensor::empty(p->shape, DType::kF32, Category::kOther, alloc);
    nn::init_values(w, p->init, 5, p->name);
    p->value.copy_from(w);
  }
  Tensor x = Tensor::empty({b, t}, DType::kI32, Category::kOther, alloc);
  Tensor y = Tensor::empty({b, t}, DType::kI32, Category::kOther, alloc);
  Rng rng(3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(c.vocab_size));
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(c.vocab_size));
  }
  nn::Context ctx{alloc};
  alloc.reset_peaks();
  Outcome r;
  r.loss = m.forward(ctx, x, y, 1.0 / double(b * t));
  m.backward(ctx);
  r.activations_peak = alloc.stats().peak_of(Category::kActivations);
  Tensor g = Tensor::empty({store.numel()}, DType::kF32, Category::kOther, alloc);
  g.copy_from(store.grads());
  r.grads.assign(g.data<float>(), g.data<float>() + g.numel());
  return r;
}

GPTConfig config() {
  GPTConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.vocab_size = 64;
  c.block_size = 32;
  return c;
}

// The same shape as a Llama: grouped-query attention (2 key/value heads for 4 query
// heads), SwiGLU, an untied head.
GPTConfig llama_config() {
  GPTConfig c = config();
  c.arch = Arch::kLlama;
  c.n_head = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 80;
  c.tie_word_embeddings = false;
  return c;
}

void expect_checkpointing_bitwise(DType d) {
  for (const GPTConfig& c : {config(), llama_config()}) {
    const char* arch = c.llama() ? "llama" : "gpt2";
    const Outcome plain = train_once(c, 0, d, 4, 32);
    for (int k : {1, 2, 3}) {
      const Outcome ck = train_once(c, k, d, 4, 32);
      EXPECT_EQ(plain.loss, ck.loss) << "every " << k << " " << dtype_name(d) << " " << arch;
      ASSERT_EQ(plain.grads.size(), ck.grads.size());
      EXPECT_EQ(0, std::memcmp(plain.grads.data(), ck.grads.data(), 4 * plain.grads.size()))
          << "every " << k << " " << dtype_name(d) << " " << arch;
    }
  }
}

TEST(ActivationCheckpointing, SameLossAndGradientsBitwise) {
  expect_checkpointing_bitwise(DType::kF32);
}

// bf16 through each gemm_lowp path: the recompute must repeat every GEMM
// bitwise (oneDNN's matmul as well as the fp32-panel path).
class CheckpointingLowp : public ::testing::TestWithParam<kernels::LowpGemmImpl> {};

TEST_P(CheckpointingLowp, SameLossAndGradientsBitwiseBf16) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  expect_checkpointing_bitwise(DType::kBF16);
}
INSTANTIATE_TEST_SUITE_P(ActivationCheckpointing, CheckpointingLowp, test::kGemmLowpPaths,
                         test::gemm_lowp_path_name);

TEST(ActivationCheckpointing, ActivationsPeakDropsAsDocumented) {
  const GPTConfig c = config();
  const int64_t b = 4, t = 32, n = b * t, ch = c.n_embd, h = c.n_head;
  // What one block saves for backward besides its output (fp32): the two
  // LayerNorm outputs, x1 and att (C each), qkv (3C), the MLP's input to
  // GELU and its output (4C each): 15 N C; the LayerNorms' mean and rstd
  // (4 N) and attention's lse (B H T). A checkpointed block keeps none of it.
  const int64_t block = 4 * (15 * n * ch + 4 * n + b * h * t);
  const Outcome plain = train_once(c, 0, DType::kF32, b, t);
  const Outcome full = train_once(c, 1, DType::kF32, b, t);
  const Outcome every2 = train_once(c, 2, DType::kF32, b, t);
  std::printf("activations peak: none %lld, every 2 %lld, full %lld bytes; a block saves %lld\n",
              static_cast<long long>(plain.activations_peak),
              static_cast<long long>(every2.activations_peak),
              static_cast<long long>(full.activations_peak), static_cast<long long>(block));
  // Full: the peak (at the start of backward) loses all blocks' saved
  // activations but those of the block being recomputed, less a little for
  // that recompute's temporaries (docs/zero.md): L - 1 blocks. Every 2:
  // blocks 0 and 2 of 4 are checkpointed, and block 3 (plain) runs its
  // backward before block 2 recomputes: 2 blocks.
  const double full_drop = double(plain.activations_peak - full.activations_peak) / block;
  const double every2_drop = double(plain.activations_peak - every2.activations_peak) / block;
  EXPECT_GE(full_drop, c.n_layer - 1.1);
  EXPECT_LE(full_drop, c.n_layer - 1.0);
  EXPECT_GE(every2_drop, c.n_layer / 2 - 0.1);
  EXPECT_LE(every2_drop, c.n_layer / 2);
}

}  // namespace
}  // namespace kiri::model
