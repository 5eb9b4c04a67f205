#include "kiri/plan/memory.h"

#include <algorithm>
#include <cmath>

#include "kiri/base/engine_limits.h"
#include "kiri/base/error.h"

namespace kiri::plan {

StateBytesPerParam state_bytes_per_param(Precision dtype) {
  if (dtype == Precision::kFp32) return {4, 4, 0, 8};
  return {2, 2, 4, 8};
}

MemoryBreakdown model_state_bytes(double psi, Precision dtype, int zero_stage, int n) {
  KIRI_CHECK_KIND(kConfig, zero_stage >= 0 && zero_stage <= 3, "ZeRO stage must be 0-3, got ",
                  zero_stage);
  KIRI_CHECK_KIND(kConfig, n >= 1, "the shard group must have at least 1 rank, got ", n);
  const StateBytesPerParam k = state_bytes_per_param(dtype);
  MemoryBreakdown m;
  m.parameters = k.parameters * psi / (zero_stage >= 3 ? n : 1);
  m.gradients = k.gradients * psi / (zero_stage >= 2 ? n : 1);
  m.optimizer_states = k.optimizer_states() * psi / (zero_stage >= 1 ? n : 1);
  return m;
}

namespace {
// O_DIRECT reads whole pages: a staged shard takes its bytes rounded up to 4 KiB.
double round_page(double bytes) {
  return std::ceil(bytes / 4096) * 4096;
}
}  // namespace

double offload_pool_bytes(const OffloadSpec& o, Precision dtype, double state_numel) {
  const StreamShape shape = stream_shape(o, dtype);
  const double per_elem = static_cast<double>(shape.bytes_per_element);
  // A chunk is whole granules, so every state's offset in its file is whole blocks.
  const double granule = static_cast<double>(shape.granule);
  const double chunk =
      std::floor(static_cast<double>(o.buffer_bytes) / per_elem / granule) * granule;
  const double whole = std::ceil(std::max(state_numel, 1.0) / granule) * granule;
  return o.buffer_count * std::min(chunk, whole) * per_elem;
}

void apply_offload(MemoryBreakdown& m, const Layout& l, double state_numel,
                   double unit_shard_elems) {
  if (l.offload.optimizer == OffloadTarget::kNvme) {
    m.nvme.optimizer_states += m.optimizer_states;
    m.optimizer_states = 0;
    m.buffers += offload_pool_bytes(l.offload, l.dtype, state_numel);
  }
  if (l.offload.parameters == OffloadTarget::kNvme) {
    m.nvme.parameters += m.parameters;
    m.parameters = 0;
    m.buffers += 2 * round_page(unit_shard_elems * value_bytes(l.dtype));
  }
  if (l.offload.gradients == OffloadTarget::kNvme) {
    // In RAM only the units in flight (parallel/shard/sharded.cpp): the one being written
    // (or added to: the write before it is retired first); accumulating, also the partial
    // sums read back for the unit in backward and the kMaxInflightReductions units reducing.
    const int units =
        kMaxInflightGradWrites + (l.step_microbatches() > 1 ? kMaxInflightReductions + 1 : 0);
    m.nvme.gradients += m.gradients;
    m.gradients = 0;
    m.buffers += units * round_page(unit_shard_elems * value_bytes(l.dtype));
  }
}

double korthikanti_layer_bytes(double s, double b, double h, double a, int t, bool sp,
                               Recompute recompute, bool flash) {
  const double sbh = s * b * h;
  // Standard attention keeps the softmax (2as²b), its dropout mask (as²b) and output (2as²b);
  // FlashAttention keeps one fp32 log-sum-exp per query row and head (4asb), cut by t as the
  // heads are.
  const double kept = flash ? 4 * a / h : 5 * a * s / h;
  const double scores = recompute == Recompute::kNone ? kept : 0;
  if (recompute == Recompute::kFull) return sp ? 2 * sbh / t : 2 * sbh;
  if (sp) return sbh / t * (34 + scores);
  return sbh * (10 + 24.0 / t + scores / t);
}

KiriLayerActivations kiri_layer_activations(double s, double b, double h, double a, int t, bool sp,
                                            Recompute recompute, Precision dtype,
                                            RecomputeModules modules) {
  const double n = s * b, q = sp ? t : 1;
  const bool fp32 = dtype == Precision::kFp32;
  const double gemm_in = fp32 ? 4 : 2;  // bytes of a linear layer's kept input
  // selective: what its modules drop (model/layers.h); the other modes drop none of these.
  const RecomputeModules drop = recompute == Recompute::kSelective ? modules : RecomputeModules{};
  KiriLayerActivations k;
  k.input = 4 * n * h / q;
  if (recompute == Recompute::kFull) return k;
  k.x1 = 4 * n * h / q;
  k.norm_stats = 4 * 4 * n / q;
  k.region_inputs = drop.layernorm ? 0 : gemm_in * 2 * n * h;
  k.qkv = 4 * 3 * n * h / t;
  // fp32: att is c_proj's input (kept by c_proj whatever the core does); mixed precision: the
  // core's own, c_proj keeps its 16-bit copy.
  k.attention_out = drop.core_attn && !fp32 ? 0 : 4 * n * h / t;
  k.attention_proj_copy = fp32 ? 0 : gemm_in * n * h / t;
  k.lse = drop.core_attn ? 0 : 4 * b * a * s / t;
  // GELU's input h, and c_proj's input GELU(h) unless mlp_act recomputes it from h.
  k.mlp_hidden = 4 * 4 * n * h / t + (drop.mlp_act ? 0 : gemm_in * 4 * n * h / t);
  return k;
}

double kiri_layer_bytes(double s, double b, double h, double a, int t, bool sp, Recompute recompute,
                        Precision dtype, RecomputeModules modules) {
  return kiri_layer_activations(s, b, h, a, t, sp, recompute, dtype, modules).total();
}

double korthikanti_llama_layer_bytes(double s, double b, double h, double a, double kv, double f,
                                     int t, bool sp, Recompute recompute, bool flash) {
  const double sb = s * b;
  if (recompute == Recompute::kFull) return sp ? 2 * sb * h / t : 2 * sb * h;
  // Whole on every tp rank: the two RMSNorms' inputs and the two linear inputs (the norms'
  // outputs). Cut by t: RoPE'd q and k, v, o_proj's input; gate, up and their product.
  const double whole = 8 * sb * h, cut = sb * (4 * h + 4 * kv + 6 * f);
  // The softmax output (2as²b), or FlashAttention's fp32 log-sum-exp (4asb).
  const double kept = flash ? 4 * a * sb : 2 * a * s * sb;
  const double scores = recompute == Recompute::kNone ? kept / t : 0;
  return (sp ? (whole + cut) / t : whole + cut / t) + scores;
}

double kiri_llama_layer_bytes(double s, double b, double h, double a, double kv, double f, int t,
                              bool sp, Recompute recompute, RecomputeModules modules) {
  const double n = s * b;
  if (recompute == Recompute::kFull) return 4 * (sp ? n * h / t : n * h);
  const RecomputeModules drop = recompute == Recompute::kSelective ? modules : RecomputeModules{};
  // core_attn: the log-sum-exp (the attention output is o_proj's input, kept).
  const double lse = drop.core_attn ? 0 : b * a * s / t;
  // Whole: the input, the RMSNorms' outputs, x1 and the norms' 1/rms; cut: q, k, v, the
  // attention output, gate, up and silu(gate)·up (mlp_act: recomputed from gate and up).
  // Sequence parallel: the input, x1 and 1/rms are this rank's rows; the norms' outputs are
  // kept gathered, whole (the regions' inputs; layernorm: recomputed from the norms' inputs).
  const double rows = 2 * n * h + 2 * n, regions = drop.layernorm ? 0 : 2 * n * h;
  const double cut = n * (2 * h + 2 * kv + (drop.mlp_act ? 2 : 3) * f);
  return 4 * (rows / (sp ? t : 1) + regions + cut / t + lse);
}

double layer_activation_bytes(const ModelSpec& model, const Layout& l, Recompute recompute) {
  const double s = static_cast<double>(l.seq_len), b = static_cast<double>(l.micro_batch);
  const double h = static_cast<double>(model.hidden), a = static_cast<double>(model.heads);
  const bool paper = l.form == ActivationForm::kPaper;
  const double scale = paper && l.dtype == Precision::kFp32 ? 2 : 1;
  const bool sp = l.sequence_parallel;
  const bool flash = l.attention() == Attention::kFlash;
  if (model.arch == Arch::kLlama) {
    const double kv = static_cast<double>(model.kv_width());
    const double f = static_cast<double>(model.ffn_width());
    return scale *
           (paper ? korthikanti_llama_layer_bytes(s, b, h, a, kv, f, l.tp, sp, recompute, flash)
                  : kiri_llama_layer_bytes(s, b, h, a, kv, f, l.tp, sp, recompute, l.modules));
  }
  return scale * (paper ? korthikanti_layer_bytes(s, b, h, a, l.tp, sp, recompute, flash)
                        : kiri_layer_bytes(s, b, h, a, l.tp, sp, recompute, l.dtype, l.modules));
}

int64_t layers_on_stage(int64_t n_layer, int pp, int stage) {
  return n_layer / pp + (stage < n_layer % pp ? 1 : 0);
}

namespace {

int64_t padded_vocab(int64_t vocab, int tp) {
  return (vocab + tp - 1) / tp * tp;
}

double block_params(const ModelSpec& m, int tp) {
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn_width());
  // Every matrix cut (q/k/v/gate/up by columns, o/down by rows), the two RMSNorms whole.
  if (m.arch == Arch::kLlama) return static_cast<double>(m.layer_matmul_params()) / tp + 2 * h;
  // Matrices and c_attn's / c_fc's biases cut; two c_proj biases and two LayerNorms whole.
  return (4 * h * h + 2 * h * f + 3 * h + f) / tp + 6 * h;
}

double embedding_params(const ModelSpec& m, int tp) {
  const double wte = static_cast<double>(padded_vocab(m.vocab, tp) / tp * m.hidden);
  return m.arch == Arch::kLlama ? wte : wte + static_cast<double>(m.max_seq * m.hidden);
}

double head_params(const ModelSpec& m, int tp, int pp) {
  const double wte = static_cast<double>(padded_vocab(m.vocab, tp) / tp * m.hidden);
  if (!m.tie_word_embeddings) return wte;  // its own, vocab-parallel
  return pp > 1 ? wte : 0;                 // tied: the last stage keeps its own copy of wte
}

int64_t logits_in_flight(const Layout& l) {
  if (l.pp > 1 && l.schedule == Schedule::kGpipe) return l.step_microbatches();
  return 1;
}

}  // namespace

double stage_params(const ModelSpec& model, int tp, int pp, int stage) {
  KIRI_CHECK(stage >= 0 && stage < pp, "stage ", stage, " of ", pp);
  if (model.params_only()) return model.params / (static_cast<double>(tp) * pp);
  double p =
      static_cast<double>(layers_on_stage(model.n_layer, pp, stage)) * block_params(model, tp);
  if (stage == 0) p += embedding_params(model, tp);
  if (stage == pp - 1)
    p += static_cast<double>(model.final_norm_params()) + head_params(model, tp, pp);
  return p;
}

double layers_in_flight(const Layout& l, int64_t stage_layers, int stage) {
  const double layers = static_cast<double>(stage_layers);
  if (l.pp == 1) return layers;
  const int64_t m = l.step_microbatches();
  switch (l.schedule) {
    case Schedule::kGpipe:
      return static_cast<double>(m) * layers;
    case Schedule::k1F1B:
      return static_cast<double>(std::min<int64_t>(l.pp - stage, m)) * layers;
    case Schedule::kInterleaved: {
      const int64_t v = l.virtual_stages;
      const int64_t chunks = std::min<int64_t>(2 * (l.pp - stage - 1) + (v - 1) * l.pp + 1, m * v);
      return static_cast<double>(chunks) * layers / static_cast<double>(v);
    }
  }
  return layers;
}

double activation_bytes(const ModelSpec& model, const Layout& l, int stage) {
  if (model.params_only()) return 0;
  const double s = static_cast<double>(l.seq_len), b = static_cast<double>(l.micro_batch);
  const double v = static_cast<double>(model.vocab);
  const bool paper = l.form == ActivationForm::kPaper;
  auto layer = [&](Recompute r) { return layer_activation_bytes(model, l, r); };
  const int64_t layers = layers_on_stage(model.n_layer, l.pp, stage);
  double bytes = layers_in_flight(l, layers, stage) * layer(l.activation_checkpointing);
  // The block being recomputed holds all of its activations (its input is counted already).
  if (l.activation_checkpointing == Recompute::kFull && layers > 0)
    bytes += layer(Recompute::kNone) - layer(Recompute::kFull);
  if (stage == l.pp - 1) {
    // kiri on one rank keeps the loss's gradient from the forward on (one-pass cross-entropy),
    // 16-bit under mixed precision; under tp the fp32 logits slice. + the int32 targets.
    const double per_logit = l.tp == 1 ? value_bytes(l.dtype) : 4;
    const double logits = paper ? 4 * s * b * v / l.tp : s * b * (per_logit * v / l.tp + 4);
    bytes += static_cast<double>(logits_in_flight(l)) * logits;
  }
  return bytes;
}

namespace {
// The reductions a ZeRO rank keeps outstanding during backward: the engine's own number.
constexpr int kInflightReductions = kMaxInflightReductions;
}  // namespace

double buffer_bytes(const ModelSpec& model, const Layout& l, int stage) {
  if (model.params_only()) return 0;
  const double d = value_bytes(l.dtype);
  const double n = l.shard_size();
  const double block_unit = l.wrap_blocks * block_params(model, l.tp);
  const double emb_unit = stage == 0 ? embedding_params(model, l.tp) : 0;
  // The engine's schedule (parallel/shard/sharded.h): the embeddings' full gradient (stages
  // 2-3) lives through backward (the tied head writes it first, the embedding last); mid-
  // backward a block unit's gradient is written while up to kInflightReductions earlier units
  // reduce (each a full gradient and its shard); at the end the embeddings reduce alone.
  const double mid = block_unit + kInflightReductions * (block_unit + block_unit / n);
  double bytes = 0;
  switch (l.zero_stage) {
    case 1:  // the shards of the reductions in flight, last micro-batch
      bytes = d * std::max(emb_unit / n + block_unit / n, kInflightReductions * block_unit / n);
      break;
    case 2:
      bytes = d * (emb_unit + std::max(emb_unit / n, mid));
      break;
    case 3:  // + the gathered embeddings (kept for the tied head), this unit and the next
      bytes = d * (2 * emb_unit + std::max(emb_unit / n, 2 * block_unit + mid));
      break;
    default:
      break;
  }
  if (l.pp > 1) {
    const double act = l.form == ActivationForm::kPaper ? value_bytes(l.dtype) : 4;
    const double tokens = static_cast<double>(l.seq_len * l.micro_batch);
    const double cut = l.form == ActivationForm::kPaper && l.sequence_parallel ? l.tp : 1;
    bytes += 2 * tokens * static_cast<double>(model.hidden) * act / cut;
  }
  return bytes;
}

MemoryBreakdown rank_memory(const ModelSpec& model, const Layout& l, int stage) {
  const double psi = stage_params(model, l.tp, l.pp, stage);
  const double n = l.shard_size();
  MemoryBreakdown m = model_state_bytes(psi, l.dtype, l.zero_stage, l.shard_size());
  // Megatron's fp32 gradient buffers (main_grad) in place of the dtype's.
  m.gradients *= static_cast<double>(l.grad_bytes()) / value_bytes(l.dtype);
  m.activations = activation_bytes(model, l, stage);
  m.buffers = buffer_bytes(model, l, stage);
  if (l.offload.any()) {
    // The largest unit: the embeddings (stage 0), wrap_blocks blocks, or the head (pp > 1).
    double unit = model.params_only() ? psi : l.wrap_blocks * block_params(model, l.tp);
    if (!model.params_only() && stage == 0) unit = std::max(unit, embedding_params(model, l.tp));
    if (!model.params_only() && stage == l.pp - 1)
      unit = std::max(unit, head_params(model, l.tp, l.pp));
    apply_offload(m, l, l.zero_stage >= 1 ? psi / n : psi, unit / n);
  }
  return m;
}

RankMemory worst_rank_memory(const ModelSpec& model, const Layout& l) {
  RankMemory r;
  for (int stage = 0; stage < l.pp; ++stage) {
    r.stages.push_back(rank_memory(model, l, stage));
    if (r.stages.back().total() > r.stages[r.stage].total()) r.stage = stage;
  }
  r.memory = r.stages[r.stage];
  return r;
}

}  // namespace kiri::plan
