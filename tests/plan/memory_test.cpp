// The memory model against the numbers of the papers and of kiri's own measurements.
#include <gtest/gtest.h>

#include "kiri/base/error.h"
#include "kiri/plan/memory.h"

namespace kiri::plan {
namespace {

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

TEST(PlanMemory, SevenBillionParamsAt2_8_12_16Bytes) {
  const StateBytesPerParam k = state_bytes_per_param(Precision::kBf16);
  EXPECT_EQ(k.parameters, 2);
  EXPECT_EQ(k.moments, 8);
  EXPECT_EQ(k.optimizer_states(), 12);
  EXPECT_EQ(k.total(), 16);
  const double psi = 7e9;
  EXPECT_NEAR(psi * k.parameters / GiB, 13.0, 0.05);
  EXPECT_NEAR(psi * k.moments / GiB, 52.2, 0.05);
  EXPECT_NEAR(psi * k.optimizer_states() / GiB, 78.2, 0.05);
  EXPECT_NEAR(psi * k.total() / GiB, 104.3, 0.05);
}

TEST(PlanMemory, Fp32StatesAre4_4_8) {
  const StateBytesPerParam k = state_bytes_per_param(Precision::kFp32);
  EXPECT_EQ(k.parameters, 4);
  EXPECT_EQ(k.gradients, 4);
  EXPECT_EQ(k.master_weights, 0);
  EXPECT_EQ(k.moments, 8);
}

TEST(PlanMemory, Gpt2XlAdamMixedPrecisionIs3_3_6_12GB) {
  const double psi = 1.5e9;
  const StateBytesPerParam k = state_bytes_per_param(Precision::kFp16);
  EXPECT_DOUBLE_EQ(psi * k.parameters, 3e9);
  EXPECT_DOUBLE_EQ(psi * k.gradients, 3e9);
  EXPECT_DOUBLE_EQ(psi * k.master_weights, 6e9);
  EXPECT_DOUBLE_EQ(psi * k.moments, 12e9);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::kFp16, 0, 1).model_states(), 24e9);
}

TEST(PlanMemory, EightBillionTimes16BytesIs128GB) {
  EXPECT_DOUBLE_EQ(model_state_bytes(8e9, Precision::kBf16, 0, 1).model_states(), 128e9);
}

TEST(PlanMemory, Gpt3Is350GBOfWeightsAnd2Point8TBOfStates) {
  const MemoryBreakdown m = model_state_bytes(175e9, Precision::kFp16, 0, 1);
  EXPECT_DOUBLE_EQ(m.parameters, 350e9);
  EXPECT_DOUBLE_EQ(m.model_states(), 2.8e12);
}

TEST(PlanMemory, ZeroPaperExample) {
  // Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, K = 12, N_d = 64.
  const double psi = 7.5e9;
  const double gb = 1e9;
  EXPECT_NEAR(model_state_bytes(psi, Precision::kBf16, 0, 64).model_states() / gb, 120.0, 0.05);
  EXPECT_NEAR(model_state_bytes(psi, Precision::kBf16, 1, 64).model_states() / gb, 31.4, 0.05);
  EXPECT_NEAR(model_state_bytes(psi, Precision::kBf16, 2, 64).model_states() / gb, 16.6, 0.05);
  EXPECT_NEAR(model_state_bytes(psi, Precision::kBf16, 3, 64).model_states() / gb, 1.9, 0.05);
}

TEST(PlanMemory, ZeroStagesShardAsDocsZeroMdSays) {
  const double psi = 1000;
  const MemoryBreakdown s1 = model_state_bytes(psi, Precision::kBf16, 1, 4);
  EXPECT_DOUBLE_EQ(s1.parameters, 2000);
  EXPECT_DOUBLE_EQ(s1.gradients, 2000);
  EXPECT_DOUBLE_EQ(s1.optimizer_states, 3000);
  const MemoryBreakdown s2 = model_state_bytes(psi, Precision::kFp32, 2, 4);
  EXPECT_DOUBLE_EQ(s2.parameters, 4000);
  EXPECT_DOUBLE_EQ(s2.gradients, 1000);
  EXPECT_DOUBLE_EQ(s2.optimizer_states, 2000);
  const MemoryBreakdown s3 = model_state_bytes(psi, Precision::kBf16, 3, 4);
  EXPECT_DOUBLE_EQ(s3.model_states(), 4000);
  EXPECT_THROW(model_state_bytes(psi, Precision::kBf16, 4, 4), Error);
}

// Korthikanti et al. 2022, Section 4, by hand for s = 2048, b = 1, h = 12288, a = 96, t = 8:
// sbh = 25,165,824 and 5as/h = 80.
TEST(PlanMemory, KorthikantiGpt3Layer) {
  const double s = 2048, b = 1, h = 12288, a = 96;
  const double sbh = 25165824;
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 1, false, Recompute::kNone),
                   2868903936.0);  // sbh·(34 + 80)
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kNone),
                   578813952.0);  // sbh·(10 + 3 + 10)
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, true, Recompute::kNone),
                   358612992.0);  // sbh/8·114
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kSelective),
                   327155712.0);  // sbh·13
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, true, Recompute::kSelective),
                   106954752.0);  // sbh/8·34
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 1, false, Recompute::kSelective), 34 * sbh);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, false, Recompute::kFull), 2 * sbh);
  EXPECT_DOUBLE_EQ(korthikanti_layer_bytes(s, b, h, a, 8, true, Recompute::kFull), 2 * sbh / 8);
}

TEST(PlanMemory, KorthikantiFirstStageOfInterleavedHoldsL1PlusPMinus1OverPV) {
  ModelSpec m = model_from_dims(96, 12288, 96, 51200, 2048);
  Layout l;
  l.tp = 8;
  l.pp = 8;
  l.dp = 1;
  l.seq_len = 2048;
  l.micro_batch = 1;
  l.global_batch = 64;
  l.form = ActivationForm::kPaper;
  l.sequence_parallel = true;
  l.activation_checkpointing = Recompute::kSelective;
  l.schedule = Schedule::k1F1B;
  // 1F1B: the first stage holds pp micro-batches of L/pp layers = L layers.
  EXPECT_DOUBLE_EQ(layers_in_flight(l, 12, 0), 96);
  EXPECT_DOUBLE_EQ(layers_in_flight(l, 12, 7), 12);
  l.schedule = Schedule::kInterleaved;
  l.virtual_stages = 2;
  EXPECT_DOUBLE_EQ(layers_in_flight(l, 12, 0), 96 * (1 + 7.0 / 16));
  l.schedule = Schedule::kGpipe;
  l.virtual_stages = 1;
  EXPECT_DOUBLE_EQ(layers_in_flight(l, 12, 0), 64 * 12);
  // Stage 0's activations under 1F1B: L layers of sbh/t·34 (no logits there).
  l.schedule = Schedule::k1F1B;
  EXPECT_DOUBLE_EQ(activation_bytes(m, l, 0), 96 * 106954752.0);
}

// docs/zero.md, "Activation checkpointing": 4 blocks, C 32, B 4, T 32 (H 2, byte vocabulary
// 256), fp32: peak 1,192,448 bytes without checkpointing, 445,952 with full.
TEST(PlanMemory, KiriFormMatchesMeasuredActivations) {
  ModelSpec m = model_from_dims(4, 32, 2, 256, 32);
  Layout l;
  l.dtype = Precision::kFp32;
  l.seq_len = 32;
  l.micro_batch = 4;
  l.global_batch = 4;
  l.form = ActivationForm::kKiri;
  EXPECT_DOUBLE_EQ(kiri_layer_bytes(32, 4, 32, 2, 1, false, Recompute::kNone) -
                       kiri_layer_bytes(32, 4, 32, 2, 1, false, Recompute::kFull),
                   248832);
  EXPECT_DOUBLE_EQ(activation_bytes(m, l, 0), 1192448);
  l.activation_checkpointing = Recompute::kFull;
  EXPECT_DOUBLE_EQ(activation_bytes(m, l, 0), 445952);
}

TEST(PlanMemory, KiriFormUnderTensorParallel) {
  // 4NC + 12NC/t + 4N + B·H·T/t floats.
  const double n = 2 * 64, c = 48;
  EXPECT_DOUBLE_EQ(kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kNone),
                   4 * (4 * n * c + 6 * n * c + 4 * n + 2 * 4 * 64 / 2.0));
  // kiri's attention keeps no scores: selective (core_attn) drops only the lse in fp32; under
  // bf16 also the core's fp32 output (4NC/t bytes); layernorm both regions' inputs (8NC, bf16
  // 4NC); mlp_act GELU's output (16NC/t, bf16 8NC/t).
  const double none = kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kNone);
  EXPECT_DOUBLE_EQ(kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kSelective),
                   none - 4 * (2 * 4 * 64 / 2.0));
  EXPECT_DOUBLE_EQ(kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kSelective, Precision::kFp32,
                                    {.layernorm = true, .mlp_act = true}),
                   none - 8 * n * c - 16 * n * c / 2);
  const double none16 =
      kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kNone, Precision::kBf16);
  EXPECT_DOUBLE_EQ(
      kiri_layer_bytes(64, 2, 48, 4, 2, false, Recompute::kSelective, Precision::kBf16),
      none16 - 4 * (2 * 4 * 64 / 2.0) - 4 * n * c / 2);
}

TEST(PlanMemory, ParameterCountsFollowTheModelsStructure) {
  EXPECT_DOUBLE_EQ(model_preset("gpt2-124M").total_params(), 124439808);
  EXPECT_DOUBLE_EQ(model_preset("llama-7B").total_params(), 6738415616);
  EXPECT_DOUBLE_EQ(model_preset("llama-13B").total_params(), 13015864320);
  const ModelSpec g = model_preset("gpt2-124M");
  EXPECT_EQ(g.layer_params(), 12 * 768 * 768 + 13 * 768);
  EXPECT_DOUBLE_EQ(stage_params(g, 1, 1, 0), 124439808);
  // pp 2: stage 0 the embeddings and 6 blocks; stage 1 6 blocks, ln_f and a copy of wte.
  const double block = 12 * 768 * 768 + 13 * 768;
  EXPECT_DOUBLE_EQ(stage_params(g, 1, 2, 0), 6 * block + 50257 * 768 + 1024 * 768);
  EXPECT_DOUBLE_EQ(stage_params(g, 1, 2, 1), 6 * block + 2 * 768 + 50257 * 768);
  // tp 2: matrices and c_attn/c_fc biases halved, 6h whole; wte over 50258 padded rows.
  const double tp_block = (12 * 768 * 768 + 7 * 768) / 2.0 + 6 * 768;
  EXPECT_DOUBLE_EQ(stage_params(g, 2, 1, 0), 12 * tp_block + 25129 * 768 + 1024 * 768 + 2 * 768);
  const ModelSpec gpt3 = model_preset("gpt3-175B");
  EXPECT_NEAR(2 * gpt3.total_params() / 1e9, 350, 1.0);
  EXPECT_NEAR(16 * gpt3.total_params() / 1e12, 2.8, 0.01);
}

}  // namespace
}  // namespace kiri::plan
