// Measured = formula (issue 16 item 4): the activations a GPT-2 block keeps for backward, as
// kiri's allocator counts them after a training forward, equal to the byte the closed form
// written here from the tensors' shapes (docs/parallelism.md, "Activations per layer") and the
// planner's (plan::kiri_layer_bytes, plan::layer_activation_bytes): no recomputation and full,
// fp32 and bf16, on 1 rank, 2 (tp 2, tp 2 + sequence parallelism, dp 2) and 4 (tp 4, tp 4 +
// sequence parallelism, tp 2 x dp 2); selective recomputation of each module and of all three,
// fp32 and bf16, on 1 rank, tp 2, tp 2 + sequence parallelism and tp 4 + sequence parallelism
// (Llama's too, fp32). A block's bytes are a 2-block model's less a 1-block
// model's; the 1-block model's whole activations are one block plus the head's (ln_f, the LM
// head's input and logits), so one tensor more or less anywhere fails.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>

#include "comm/harness.h"
#include "kiri/base/rng.h"
#include "kiri/model/gpt.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/plan/memory.h"

namespace kiri::model {
namespace {

using comm::Communicator;

struct ActCase {
  int tp = 1, dp = 1;
  bool sp = false, full = false, bf16 = false;
  bool llama = false;  // llama-tiny's block at these shapes (fp32: the kiri Llama form's dtype)
  SelectiveRecompute sel = {};  // any(): activation_checkpointing = selective, these modules
};

// Tiny GPT-2: 4 heads (tp 4 divides them), C 32, a vocabulary that tp 4 divides; b 2 x s 16:
// 32 token rows (sequence parallelism splits them over 4).
constexpr int64_t kHeads = 4, kC = 32, kVocab = 64, kB = 2, kS = 16;
constexpr int64_t kKvHeads = 2, kFfn = 80;  // Llama: grouped-query attention, SwiGLU

GPTConfig config(int layers, bool llama) {
  GPTConfig c;
  if (llama) {
    c.arch = Arch::kLlama;
    c.num_key_value_heads = static_cast<int>(kKvHeads);
    c.intermediate_size = static_cast<int>(kFfn);
    c.tie_word_embeddings = false;
  }
  c.n_layer = layers;
  c.n_head = static_cast<int>(kHeads);
  c.n_embd = static_cast<int>(kC);
  c.vocab_size = static_cast<int>(kVocab);
  c.block_size = static_cast<int>(kS);
  return c;
}

// The closed form from the shapes, bytes of one block (docs/parallelism.md's table, row by row).
int64_t block_form(const ActCase& k) {
  const int64_t n = kB * kS, t = k.tp, q = k.sp ? k.tp : 1;  // q: the residual stream's cut
  const int64_t f32 = 4, in = k.bf16 ? 2 : 4;  // a linear layer keeps its input in `in` bytes
  const int64_t input = f32 * n / q * kC;      // ln_1's x
  if (k.full) return input;
  const SelectiveRecompute& r = k.sel;        // selective: what the block does not keep
  const int64_t x1 = f32 * n / q * kC;        // ln_2's x
  const int64_t stats = 2 * 2 * f32 * n / q;  // two norms' mean, rstd
  const int64_t regions = r.layernorm ? 0 : 2 * in * n * kC;  // X_region, whole
  const int64_t qkv = f32 * n * 3 * kC / t;                   // the core's qkv
  // The core's att (fp32: c_proj's input too, kept; bf16: the core's own) + c_proj's copy.
  const int64_t att =
      (r.core_attn && k.bf16 ? 0 : f32 * n * kC / t) + (k.bf16 ? in * n * kC / t : 0);
  const int64_t lse = r.core_attn ? 0 : f32 * kB * (kHeads / t) * kS;  // the core's lse
  const int64_t mlp = f32 * n * 4 * kC / t + (r.mlp_act ? 0 : in * n * 4 * kC / t);  // h, GELU(h)
  return input + x1 + stats + regions + qkv + att + lse + mlp;
}

// The head's: ln_f's x, mean and rstd; the LM head's input (gathered under sequence
// parallelism; its 16-bit copy under bf16); on one rank the loss's gradient [n, V], computed
// in the forward (16-bit under bf16), else the logits [n, V/t] and the loss's lse [n].
int64_t head_form(const ActCase& k) {
  const int64_t n = kB * kS, q = k.sp ? k.tp : 1;
  const int64_t loss = k.tp == 1 ? (k.bf16 ? 2 : 4) * n * kVocab : 4 * n * kVocab / k.tp + 4 * n;
  return 4 * n / q * kC + 2 * 4 * n / q + (k.bf16 ? 2 : 4) * n * kC + loss;
}

struct Kept {
  int64_t after_forward = 0, after_backward = 0;
};

// One training forward and backward of a `layers`-block model on this rank's tp group.
Kept run_model(Communicator* tp, const ActCase& k, int layers) {
  Allocator alloc;
  GPT<float> m(config(layers, k.llama));
  m.apply_tp({tp, k.sp});
  m.set_activation_checkpointing(k.full ? 1 : 0);
  m.set_selective_recompute(k.sel);
  nn::ParameterStore store(m.parameters(), k.bf16 ? DType::kBF16 : DType::kF32, alloc);
  for (nn::Parameter* p : m.parameters()) {
    Tensor w = Tensor::empty(p->shape, DType::kF32, Category::kOther, alloc);
    nn::init_values(w, p->init, 5, p->name);
    p->value.copy_from(w);
  }
  Tensor x = Tensor::empty({kB, kS}, DType::kI32, Category::kOther, alloc);
  Tensor y = Tensor::empty({kB, kS}, DType::kI32, Category::kOther, alloc);
  Rng rng(3);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(kVocab));
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(kVocab));
  }
  nn::Context ctx{alloc};
  EXPECT_EQ(alloc.stats().of(Category::kActivations), 0);
  m.forward(ctx, x, y, 1.0 / double(kB * kS));
  Kept r;
  r.after_forward = alloc.stats().of(Category::kActivations);
  m.backward(ctx);
  r.after_backward = alloc.stats().of(Category::kActivations);
  return r;
}

std::string name_of(const ActCase& k) {
  return std::string(k.llama ? "llama " : "") + "tp " + std::to_string(k.tp) + " dp " +
         std::to_string(k.dp) + (k.sp ? " sp" : "") +
         (k.full        ? " full"
          : k.sel.any() ? " selective " + kiri::name(k.sel)
                        : " none") +
         (k.bf16 ? " bf16" : " fp32");
}

void check_rank(Communicator& world, const ActCase& k) {
  omp_set_num_threads(1);  // ranks share the cores
  std::unique_ptr<Communicator> group;
  if (k.tp > 1) group = world.split(world.rank() / k.tp, world.rank(), "tp");
  const Kept one = run_model(group.get(), k, 1), two = run_model(group.get(), k, 2);
  const int64_t block = two.after_forward - one.after_forward;
  const std::string what = name_of(k) + ", rank " + std::to_string(world.rank());
  if (world.rank() == 0)
    std::printf("%s: a block keeps %lld bytes\n", name_of(k).c_str(),
                static_cast<long long>(block));
  const plan::Recompute r = k.full        ? plan::Recompute::kFull
                            : k.sel.any() ? plan::Recompute::kSelective
                                          : plan::Recompute::kNone;
  if (k.llama) {  // the planner's Llama form (fp32), and 4 bytes per RMSNorm's 1/rms
    EXPECT_EQ(plan::kiri_llama_layer_bytes(kS, kB, kC, kHeads, kC / kHeads * kKvHeads, kFfn, k.tp,
                                           k.sp, r, k.sel),
              static_cast<double>(block))
        << what;
    return;
  }
  EXPECT_EQ(block, block_form(k)) << what;
  EXPECT_EQ(one.after_forward, block_form(k) + head_form(k)) << what;
  EXPECT_EQ(one.after_backward, 0) << what << ": backward released everything";
  EXPECT_EQ(two.after_backward, 0) << what;
  // The planner's form, and its layer of a layout with this tp, sp, dtype and recompute.
  const plan::Precision d = k.bf16 ? plan::Precision::kBf16 : plan::Precision::kFp32;
  EXPECT_EQ(plan::kiri_layer_bytes(kS, kB, kC, kHeads, k.tp, k.sp, r, d, k.sel),
            static_cast<double>(block))
      << what;
  plan::Layout l;
  l.dp = k.dp;
  l.tp = k.tp;
  l.sequence_parallel = k.sp;
  l.dtype = d;
  l.activation_checkpointing = r;
  if (k.sel.any()) l.modules = k.sel;
  l.seq_len = kS;
  l.micro_batch = kB;
  l.global_batch = kB * k.dp;
  l.form = plan::ActivationForm::kKiri;
  const plan::ModelSpec spec = plan::model_from_dims(2, kC, kHeads, kVocab, kS);
  EXPECT_EQ(plan::layer_activation_bytes(spec, l, r), static_cast<double>(block)) << what;
}

void check(int tp, int dp, bool sp) {
  for (bool full : {false, true})
    for (bool bf16 : {false, true}) {
      const ActCase k{tp, dp, sp, full, bf16};
      KIRI_RUN_RANKS(tp * dp, [k](Communicator& w) { check_rank(w, k); });
    }
}

// Selective recomputation: each module, and all three, fp32 and bf16.
void check_selective(int tp, bool sp, bool llama = false) {
  const SelectiveRecompute each[] = {{.core_attn = true},
                                     {.layernorm = true},
                                     {.mlp_act = true},
                                     {.core_attn = true, .layernorm = true, .mlp_act = true}};
  for (const SelectiveRecompute& sel : each)
    for (bool bf16 : {false, true}) {
      if (llama && bf16) continue;  // the kiri Llama form is fp32's
      ActCase k{tp, 1, sp, false, bf16, llama};
      k.sel = sel;
      KIRI_RUN_RANKS(tp, [k](Communicator& w) { check_rank(w, k); });
    }
}

TEST(ActivationMeasured, SelectiveOneRank) {
  check_selective(1, false);
}
TEST(ActivationMeasured, SelectiveTp2) {
  check_selective(2, false);
}
TEST(ActivationMeasured, SelectiveTp2Sp) {
  check_selective(2, true);
}
TEST(ActivationMeasured, SelectiveTp4Sp) {
  check_selective(4, true);
}
TEST(ActivationMeasured, SelectiveLlamaTp2) {
  check_selective(2, false, true);
  check_selective(2, true, true);
}

TEST(ActivationMeasured, OneRank) {
  check(1, 1, false);
}
TEST(ActivationMeasured, Tp2) {
  check(2, 1, false);
}
TEST(ActivationMeasured, Tp2Sp) {
  check(2, 1, true);
}
TEST(ActivationMeasured, Dp2) {
  check(1, 2, false);
}
TEST(ActivationMeasured, Tp4) {
  check(4, 1, false);
}
TEST(ActivationMeasured, Tp4Sp) {
  check(4, 1, true);
}
TEST(ActivationMeasured, Tp2Dp2Sp) {
  check(2, 2, true);
}

// Llama's block (the planner's kiri form, fp32): tp 2 with and without sequence parallelism.
TEST(ActivationMeasured, LlamaTp2) {
  for (bool sp : {false, true})
    for (bool full : {false, true}) {
      const ActCase k{2, 1, sp, full, false, true};
      KIRI_RUN_RANKS(2, [k](Communicator& w) { check_rank(w, k); });
    }
}

// The table's rows at gpt2-124M's shapes (h 768, a 12, s 1024, b 1, tp 4), fp32: none
// 4(2nh/4 + 2nh + 12nh/4 + 4n/4 + as/4) with sequence parallelism, 4(4nh + 12nh/4 + 4n +
// as/4) without; the form's rows sum to its total.
TEST(ActivationMeasured, PlannerRowsAtGpt2Shapes) {
  const double s = 1024, b = 1, h = 768, a = 12, n = s * b;
  const auto k = plan::kiri_layer_activations(s, b, h, a, 4, true, plan::Recompute::kNone);
  EXPECT_DOUBLE_EQ(k.total(), 4 * (2 * n * h / 4 + 2 * n * h + 12 * n * h / 4 + n + a * s / 4));
  EXPECT_DOUBLE_EQ(plan::kiri_layer_bytes(s, b, h, a, 4, false, plan::Recompute::kNone),
                   4 * (4 * n * h + 12 * n * h / 4 + 4 * n + a * s / 4));
  const auto m = plan::kiri_layer_activations(s, b, h, a, 4, false, plan::Recompute::kNone,
                                              plan::Precision::kBf16);
  EXPECT_DOUBLE_EQ(m.total(), 8 * n * h + 4 * n * h + 42 * n * h / 4 + 4 * (4 * n + a * s / 4));
}

}  // namespace
}  // namespace kiri::model
