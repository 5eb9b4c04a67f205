// The planner's LLaMA: parameters, FLOPs and activations of grouped-query attention, SwiGLU,
// RMSNorm and a tied or untied head, by hand and against the published parameter counts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/plan/planner.h"

namespace kiri::plan {
namespace {

// A block by its tensors: q [h, h], k and v [kv·d, h], o [h, h], gate and up [f, h], down
// [h, f], two RMSNorms [h]; d = h / heads.
int64_t block_by_hand(int64_t h, int64_t heads, int64_t kv, int64_t f) {
  const int64_t kv_width = kv * (h / heads);
  return h * h + 2 * kv_width * h + h * h + 3 * f * h + 2 * h;
}

// wte, the blocks, the final RMSNorm, and lm_head unless tied.
double total_by_hand(int64_t layers, int64_t h, int64_t heads, int64_t kv, int64_t f, int64_t v,
                     bool tied) {
  return static_cast<double>(v * h + layers * block_by_hand(h, heads, kv, f) + h +
                             (tied ? 0 : v * h));
}

TEST(PlanLlama, PresetParameterCountsAreThePublishedOnes) {
  struct Preset {
    const char* name;
    int64_t layers, h, heads, kv, f, v;
    bool tied;
    int64_t context;
    double published;  // the model's own count (0: kiri's test model)
  };
  // Meta-Llama-3-8B 8,030,261,248 (its safetensors' total); SmolLM(2)-135M 134,515,008 and
  // TinyLlama-1.1B 1,100,048,384 (transformers' num_parameters()); LLaMA 7B and 13B
  // 6,738,415,616 and 13,015,864,320.
  for (const Preset& p : std::vector<Preset>{
           {"llama-tiny", 2, 64, 4, 2, 176, 256, false, 256, 0},
           {"smollm-135M", 30, 576, 9, 3, 1536, 49152, true, 2048, 134515008},
           {"tinyllama-1.1B", 22, 2048, 32, 4, 5632, 32000, false, 2048, 1100048384},
           {"llama-7B", 32, 4096, 32, 32, 11008, 32000, false, 2048, 6738415616},
           {"llama-13B", 40, 5120, 40, 40, 13824, 32000, false, 2048, 13015864320},
           {"llama3-8B", 32, 4096, 32, 8, 14336, 128256, false, 8192, 8030261248}}) {
    const ModelSpec m = model_preset(p.name);
    EXPECT_EQ(m.arch, Arch::kLlama) << p.name;
    EXPECT_EQ(m.n_layer, p.layers) << p.name;
    EXPECT_EQ(m.hidden, p.h) << p.name;
    EXPECT_EQ(m.heads, p.heads) << p.name;
    EXPECT_EQ(m.kv_head_count(), p.kv) << p.name;
    EXPECT_EQ(m.ffn_width(), p.f) << p.name;
    EXPECT_EQ(m.vocab, p.v) << p.name;
    EXPECT_EQ(m.tie_word_embeddings, p.tied) << p.name;
    EXPECT_EQ(m.max_seq, p.context) << p.name;
    EXPECT_EQ(m.layer_params(), block_by_hand(p.h, p.heads, p.kv, p.f)) << p.name;
    EXPECT_EQ(m.layer_matmul_params(), m.layer_params() - 2 * p.h) << p.name;
    EXPECT_EQ(m.total_params(), total_by_hand(p.layers, p.h, p.heads, p.kv, p.f, p.v, p.tied))
        << p.name;
    if (p.published > 0) {
      EXPECT_EQ(m.total_params(), p.published) << p.name;
    }
  }
  EXPECT_EQ(model_preset("llama-tiny").total_params(), 125248);
  // Llama 3 8B by its pieces: a block 218,112,000, wte and lm_head 525,336,576 each.
  const ModelSpec l3 = model_preset("llama3-8B");
  EXPECT_EQ(l3.kv_width(), 1024);
  EXPECT_EQ(l3.layer_params(), 218112000);
  EXPECT_EQ(l3.embedding_params(), 525336576);
  EXPECT_EQ(l3.head_params(), 525336576);
  EXPECT_EQ(l3.final_norm_params(), 4096);
}

TEST(PlanLlama, ExplicitDimensionsAndTheirErrors) {
  // Llama 3 8B's shape given by hand, and tied: one V·h less.
  EXPECT_EQ(llama_from_dims(32, 4096, 32, 8, 14336, 128256, false).total_params(), 8030261248);
  EXPECT_EQ(llama_from_dims(32, 4096, 32, 8, 14336, 128256, true).total_params(),
            8030261248.0 - 128256.0 * 4096);
  // Llama 3.2 1B's shape (docs/planner.md's example): 16 × 2048, 8 kv heads, tied.
  EXPECT_EQ(llama_from_dims(16, 2048, 32, 8, 8192, 128256, true).total_params(), 1235814400);
  // Multi-query attention: one kv head of head_dim 128.
  EXPECT_EQ(llama_from_dims(32, 4096, 32, 1, 14336, 128256, false).layer_params(),
            block_by_hand(4096, 32, 1, 14336));
  // Meta's SwiGLU width: LLaMA 7B's and 13B's intermediate_size.
  EXPECT_EQ(llama_default_ffn(4096), 11008);
  EXPECT_EQ(llama_default_ffn(5120), 13824);
  EXPECT_EQ(llama_default_ffn(64), 256);
  try {
    llama_from_dims(2, 64, 4, 3, 176, 256, false);
    ADD_FAILURE() << "3 kv heads for 4 query heads";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("--kv-heads 3 does not divide --heads 4"), std::string::npos)
        << e.message();
  }
  EXPECT_THROW(llama_from_dims(2, 64, 4, 0, 176, 256, false), Error);
  EXPECT_THROW(llama_from_dims(2, 64, 5, 5, 176, 256, false), Error);  // 5 does not divide 64
}

TEST(PlanLlama, StageParametersUnderTpAndPp) {
  const ModelSpec m = model_preset("llama3-8B");
  const double h = 4096, block = 218103808.0 / 2 + 2 * h;  // matrices cut, RMSNorms whole
  // tp 2, pp 2: 16 blocks each; stage 0 wte's 64128 rows, stage 1 the norm and lm_head's.
  EXPECT_DOUBLE_EQ(stage_params(m, 2, 2, 0), 16 * block + 64128 * h);
  EXPECT_DOUBLE_EQ(stage_params(m, 2, 2, 1), 16 * block + h + 64128 * h);
  // tp 1, pp 1: the whole model.
  EXPECT_DOUBLE_EQ(stage_params(m, 1, 1, 0), 8030261248);
  // Tied (SmolLM): no head of its own at pp 1; the last stage's copy of wte at pp 2.
  const ModelSpec s = model_preset("smollm-135M");
  EXPECT_DOUBLE_EQ(stage_params(s, 1, 1, 0), 134515008);
  EXPECT_DOUBLE_EQ(stage_params(s, 3, 2, 1), 15 * (3538944.0 / 3 + 2 * 576) + 576 + 16384 * 576);
}

// 3 × (L·(2·matmul weights + 4sh) + 2hV) per token: 6N + 12·L·s·h, N the matrices' weights
// (k and v h × 1024 under grouped-query attention) and lm_head's.
TEST(PlanLlama, FlopsPerTokenByHand) {
  const ModelSpec m = model_preset("llama3-8B");
  Layout l;
  l.seq_len = 8192;
  l.global_batch = 1;
  l.form = ActivationForm::kPaper;
  const double per_token = 57912852480;  // 3 × (32·(2·218103808 + 4·8192·4096) + 2·4096·128256)
  const double n = 32 * 218103808.0 + 4096.0 * 128256;
  EXPECT_EQ(6 * n + 12 * 32 * 8192.0 * 4096, per_token);
  EXPECT_DOUBLE_EQ(step_flops(m, l).model, 8192 * per_token);
  EXPECT_DOUBLE_EQ(step_flops(m, l).executed, 8192 * per_token);
  l.activation_checkpointing = Recompute::kFull;  // + a forward of the blocks
  EXPECT_DOUBLE_EQ(step_flops(m, l).executed, 8192 * 76166463488.0);
  // Without grouped-query attention (32 kv heads) the k and v projections cost 4× more.
  ModelSpec mha = m;
  mha.kv_heads = 32;
  l.activation_checkpointing = Recompute::kNone;
  EXPECT_DOUBLE_EQ(step_flops(mha, l).model - step_flops(m, l).model,
                   8192 * 3 * 32 * 2 * (2 * 4096.0 * 4096 - 2 * 4096.0 * 1024));
}

// Llama 3 8B's block, s 2048, b 1: sb(12h + 4kv + 6f) + 2as²b = 2048·139264 + 268435456.
TEST(PlanLlama, PaperFormPerLayerByHand) {
  const double s = 2048, b = 1, h = 4096, a = 32, kv = 1024, f = 14336;
  auto bytes = [&](int t, bool sp, Recompute r) {
    return korthikanti_llama_layer_bytes(s, b, h, a, kv, f, t, sp, r);
  };
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kNone), 553648128);
  // tp 8: sb(8h + (4h + 4kv + 6f)/8) + 2as²b/8 = 2048·46080 + 33554432.
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kNone), 127926272);
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kNone), 69206016);  // 2048·139264/8 + 33554432
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kSelective), 94371840);
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kSelective), 35651584);
  EXPECT_DOUBLE_EQ(bytes(8, false, Recompute::kFull), 16777216);  // 2sbh
  EXPECT_DOUBLE_EQ(bytes(8, true, Recompute::kFull), 2097152);
  // Grouped-query attention stores k and v at kv's width: 4sb(h − kv) less than MHA's.
  EXPECT_DOUBLE_EQ(korthikanti_llama_layer_bytes(s, b, h, a, h, f, 1, false, Recompute::kNone) -
                       bytes(1, false, Recompute::kNone),
                   4 * s * b * (h - kv));
  // With kv = h and f = 8h/3, the same accounting as GPT's without dropout: 32sbh + 2as²b
  // (Korthikanti's 34sbh + 5as²b less the two sbh masks and the as²b mask and its 2as²b output).
  EXPECT_DOUBLE_EQ(
      korthikanti_llama_layer_bytes(s, b, 3072, a, 3072, 8192, 1, false, Recompute::kNone),
      32 * s * b * 3072 + 2 * a * s * s * b);
}

// llama-tiny's block in kiri's fp32 storage, s 32, b 2 (n = 64): whole 4nh + 2n = 16512,
// cut n(2h + 2kv + 3f) = 46080, lse b·a·s = 256 floats.
TEST(PlanLlama, KiriFormPerLayerByHand) {
  const double s = 32, b = 2, h = 64, a = 4, kv = 32, f = 176;
  auto bytes = [&](int t, bool sp, Recompute r) {
    return kiri_llama_layer_bytes(s, b, h, a, kv, f, t, sp, r);
  };
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kNone), 4 * (16512 + 46080 + 256));
  EXPECT_DOUBLE_EQ(bytes(2, false, Recompute::kNone), 4 * (16512 + 23040 + 128));
  // Sequence parallel: the input, x1 and 1/rms (2nh + 2n = 8320) cut, the norms' outputs
  // (the regions' inputs, 2nh = 8192) kept whole.
  EXPECT_DOUBLE_EQ(bytes(2, true, Recompute::kNone), 4 * (8320 / 2 + 8192 + 46080 / 2 + 128));
  // Selective (core_attn, the default): the lse (128 floats at tp 2) is recomputed; with all
  // three modules also the norms' outputs (2nh = 8192) and silu(gate)·up (nf/t = 5632).
  EXPECT_DOUBLE_EQ(bytes(2, false, Recompute::kSelective),
                   bytes(2, false, Recompute::kNone) - 4 * 128);
  EXPECT_DOUBLE_EQ(kiri_llama_layer_bytes(s, b, h, a, kv, f, 2, false, Recompute::kSelective,
                                          {.core_attn = true, .layernorm = true, .mlp_act = true}),
                   bytes(2, false, Recompute::kNone) - 4 * (128 + 8192 + 5632));
  EXPECT_DOUBLE_EQ(bytes(1, false, Recompute::kFull), 4 * 64 * 64);
  EXPECT_DOUBLE_EQ(bytes(2, true, Recompute::kFull), 4 * 64 * 64 / 2);
  // A stage of llama-tiny (2 blocks, pp 1, full recomputation): both inputs, one block
  // recomputed whole, the [n, V] fp32 logits and the int32 targets.
  const ModelSpec m = model_preset("llama-tiny");
  Layout l;
  l.seq_len = 32;
  l.micro_batch = 2;
  l.global_batch = 2;
  l.dtype = Precision::kFp32;
  l.activation_checkpointing = Recompute::kFull;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, l, Recompute::kNone),
                   bytes(1, false, Recompute::kNone));
  EXPECT_DOUBLE_EQ(activation_bytes(m, l, 0),
                   2 * 16384 + (bytes(1, false, Recompute::kNone) - 16384) + 4 * 64 * (256 + 1));
  // The paper form in fp32 doubles its 16-bit bytes.
  l.form = ActivationForm::kPaper;
  l.activation_checkpointing = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(
      layer_activation_bytes(m, l, Recompute::kSelective),
      2 * korthikanti_llama_layer_bytes(s, b, h, a, kv, f, 1, false, Recompute::kSelective));
}

// tp must keep whole query heads and whole key/value heads on each rank.
TEST(PlanLlama, TpMustDivideQueryAndKvHeads) {
  struct Case {
    const char* model;
    int tp;
    const char* words;
  };
  for (const Case& c : std::vector<Case>{
           {"tinyllama-1.1B", 8, "--tp = 8 must divide --kv-heads = 4 (--heads = 32)"},
           {"llama3-8B", 16, "--tp = 16 must divide --kv-heads = 8 (--heads = 32)"},
           {"smollm-135M", 2, "--tp = 2 must divide --heads = 9"},
           {"smollm-135M", 9, "--tp = 9 must divide --kv-heads = 3 (--heads = 9)"}}) {
    const ModelSpec m = model_preset(c.model);
    Layout l;
    l.tp = c.tp;
    l.seq_len = 256;
    try {
      validate(l, m);
      ADD_FAILURE() << c.model << " tp " << c.tp;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(e.message().find(c.words), std::string::npos) << c.model << ": " << e.message();
    }
  }
  Layout l;
  l.seq_len = 256;
  l.tp = 4;
  EXPECT_NO_THROW(validate(l, model_preset("tinyllama-1.1B")));
  l.tp = 3;
  EXPECT_NO_THROW(validate(l, model_preset("smollm-135M")));
  l.tp = 8;
  EXPECT_NO_THROW(validate(l, model_preset("llama3-8B")));
  // RoPE has no position table: a sequence beyond the context is not a planner error.
  l.seq_len = 16384;
  EXPECT_NO_THROW(validate(l, model_preset("llama3-8B")));
}

// The exact mode's parameter groups (kiri's GPT::parameter_groups for a Llama): llama-tiny's
// block in 4 layers with the byte vocabulary (257) by hand; whole, they sum to the model's
// count; the units and the model states of a ZeRO-3 shard group of 2.
TEST(PlanLlama, ExactModeGroupsByHand) {
  const ModelSpec untied = llama_from_dims(4, 64, 4, 2, 176, 257, false, 64);
  const ModelSpec tied = llama_from_dims(4, 64, 4, 2, 176, 257, true, 64);
  // A block: q and o 64·64, k and v 32·64, gate, up and down 176·64, two RMSNorms 64.
  const int64_t block = 2 * 4096 + 2 * 2048 + 3 * 11264 + 128, wte = 257 * 64;
  ASSERT_EQ(block, 46208);
  using G = std::vector<int64_t>;
  EXPECT_EQ(kiri_parameter_groups(untied, 1, 1, 0, {0, 4}),
            (G{wte, block, block, block, block, 64 + wte}));
  EXPECT_EQ(kiri_parameter_groups(tied, 1, 1, 0, {0, 4}), (G{wte, block, block, block, block, 64}));
  double sum = 0;
  for (int64_t g : kiri_parameter_groups(untied, 1, 1, 0, {0, 4})) sum += static_cast<double>(g);
  EXPECT_EQ(sum, untied.total_params());
  // tp 2: 129 of the 258 padded rows; q 32, k and v 16, gate/up/down 88 of 176 per rank.
  const int64_t block_tp2 = 64 * (2 * 32 + 2 * 16 + 3 * 88) + 128, wte_tp2 = 129 * 64;
  EXPECT_EQ(kiri_parameter_groups(untied, 2, 1, 0, {0, 4}),
            (G{wte_tp2, block_tp2, block_tp2, block_tp2, block_tp2, 64 + wte_tp2}));
  // pp 2: stage 0 the embedding and its blocks; the last stage the norm and the head (tied:
  // its own copy of the embedding).
  EXPECT_EQ(kiri_parameter_groups(untied, 1, 2, 0, {0, 2}), (G{wte, block, block, 0}));
  EXPECT_EQ(kiri_parameter_groups(untied, 1, 2, 1, {2, 4}), (G{0, block, block, 64 + wte}));
  EXPECT_EQ(kiri_parameter_groups(tied, 1, 2, 1, {2, 4}), (G{0, block, block, 64 + wte}));
  // Units of 2 blocks, each padded to a multiple of 2: 16448, 92416, 92416, 16512 (all even).
  const G units = kiri_units(kiri_parameter_groups(untied, 1, 1, 0, {0, 4}), 1, 2);
  EXPECT_EQ(units, (G{wte, 2 * block, 2 * block, 64 + wte}));
  const MemoryBreakdown z3 = kiri_model_state_bytes(units, Precision::kBf16, 3, 2);
  EXPECT_EQ(z3.parameters, 2.0 * 217792 / 2);
  EXPECT_EQ(z3.optimizer_states, 12.0 * 217792 / 2);
  // kiri splits the SwiGLU width whole: tp 2 and 175 columns is refused, naming both.
  try {
    kiri_parameter_groups(llama_from_dims(4, 64, 4, 2, 175, 257, false, 64), 2, 1, 0, {0, 4});
    ADD_FAILURE() << "tp 2 split 175 columns";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("tp = 2 must divide the MLP width = 175"), std::string::npos)
        << e.message();
  }
}

TEST(PlanLlama, PlannerLaysOutLlama3On8A100s) {
  PlanRequest r{model_preset("llama3-8B"), cluster_preset("a100-80g-nvlink"), 8, Layout{}};
  r.base.seq_len = 8192;
  r.base.global_batch = 512;
  const std::vector<Evaluation> cs = enumerate_layouts(r);
  ASSERT_FALSE(cs.empty());
  for (const Evaluation& e : cs) EXPECT_EQ(8 % e.layout.tp, 0) << e.layout.str();
  const Recommendation rec = recommend(r, cs);
  ASSERT_TRUE(rec.best.has_value()) << rec.message;
  EXPECT_TRUE(rec.best->fits);
  // 8.03e9 × 16 bytes of states do not fit one 80 GiB device: the states (or the layers
  // holding them) are cut.
  EXPECT_TRUE(rec.bottleneck == "model_states" || rec.bottleneck == "layers") << rec.message;
  const Layout& l = rec.best->layout;
  EXPECT_TRUE(l.zero_stage > 0 || l.tp > 1 || l.pp > 1) << l.str();
  // TinyLlama's 4 kv heads: no layout of tp 8.
  PlanRequest t{model_preset("tinyllama-1.1B"), cluster_preset("a100-80g-nvlink"), 8, Layout{}};
  t.base.seq_len = 2048;
  t.base.global_batch = 512;
  const std::vector<Evaluation> tcs = enumerate_layouts(t);
  ASSERT_FALSE(tcs.empty());
  bool tp4 = false;
  for (const Evaluation& e : tcs) {
    EXPECT_LE(e.layout.tp, 4) << e.layout.str();
    tp4 = tp4 || e.layout.tp == 4;
  }
  EXPECT_TRUE(tp4);
}

// kiri's pipeline cut balances FLOPs with grouped-query attention's blocks: Llama 3 8B's
// block 2·218,103,808 + 4·8192·4096 per token, its head 2·4096·128256 (1.84 blocks), so the
// first stage takes 17 blocks and the last 15 and the head.
TEST(PlanLlama, PipelineCutCountsTheSmallerKvProjections) {
  const ModelSpec m = model_preset("llama3-8B");
  Layout l;
  l.pp = 2;
  l.seq_len = 8192;
  l.global_batch = 8;
  const std::vector<StageBlocks> chunks = pipeline_chunks(m, l);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].end - chunks[0].first, 17);
  EXPECT_EQ(chunks[1].end - chunks[1].first, 15);
}

// One micro-batch's time of llama-tiny on the assumed this-machine: its GEMMs at the rate
// and the elementwise work of GPT's per token × hidden scaled by (12h + 4kv + 6f)/(34h).
TEST(PlanLlama, StageTimeByHand) {
  const ModelSpec m = model_preset("llama-tiny");
  const ClusterSpec c = this_machine_assumed();
  Layout l;
  l.dtype = Precision::kFp32;
  l.seq_len = 32;
  l.global_batch = 1;
  const TimeBreakdown t = estimate_time(m, l, c);
  const double h = 64, s = 32, tokens = 32, v = 256, rate = 176e9 * 0.6;
  const double matmul = 2 * 46080.0, att = 4 * s * h;
  const double block =
      tokens * ((3 * (matmul + att) + att / 2) / rate + h * (136 / 10e9) * (1952.0 / 2176));
  const double head = tokens * (3 * 2 * h * v / rate + v * kLogitBytes / 10e9);  // one-pass loss
  ASSERT_EQ(t.stage_s.size(), 1u);
  EXPECT_NEAR(t.stage_s[0], 2 * block + head, 1e-12 * t.stage_s[0]);
}

}  // namespace
}  // namespace kiri::plan
