// kiri's exact layout (memory.h, "kiri's exact layout"): what one rank of a kiri run
// allocates, per category, from the model's parameter groups and the engines' schedules.
#include "kiri/plan/memory.h"

#include <algorithm>

#include "kiri/base/engine_limits.h"
#include "kiri/base/error.h"

namespace kiri::plan {

namespace {

// The reductions a ZeRO rank keeps outstanding during backward: the engine's own number.
constexpr int kInflightReductions = kMaxInflightReductions;

// The vocabulary padded to a multiple of tp (the vocab-parallel tables).
int64_t padded_vocab(int64_t vocab, int tp) {
  return (vocab + tp - 1) / tp * tp;
}

// A tensor-parallel rank's share of a width that tp splits whole (kiri refuses the rest).
int64_t tp_share(int64_t width, int tp, const char* what) {
  KIRI_CHECK_KIND(kConfig, width % tp == 0, "kiri's exact layout: tp = ", tp, " must divide ", what,
                  " = ", width);
  return width / tp;
}

int64_t kiri_block_params(const ModelSpec& m, int tp) {
  const int64_t h = m.hidden;
  if (m.arch == Arch::kLlama) {
    // q_proj [h/t, h], k_proj and v_proj [kv/t, h], o_proj [h, h/t], gate_proj and up_proj
    // [f/t, h], down_proj [h, f/t], no biases; two RMSNorms h each, whole.
    const int64_t q = tp_share(h, tp, "the hidden size"),
                  kv = tp_share(m.kv_width(), tp, "the key/value width"),
                  f = tp_share(m.ffn_width(), tp, "the MLP width");
    return h * (2 * q + 2 * kv + 3 * f) + 2 * h;
  }
  // c_attn [3h/t, h] + 3h/t, c_proj [h, h/t] + h, c_fc [4h/t, h] + 4h/t, c_proj [h, 4h/t] + h,
  // two LayerNorms 4h.
  return (12 * h * h + 7 * h) / tp + 6 * h;
}

// Whether the LM head is wte (GPT-2 always; a Llama per tie_word_embeddings).
bool kiri_tied(const ModelSpec& m) {
  return m.arch != Arch::kLlama || m.tie_word_embeddings;
}

int64_t kiri_wte_rows(const ModelSpec& m, int tp) {
  return padded_vocab(m.vocab, tp) / tp;
}

StageBlocks stage_blocks(const ModelSpec& m, int pp, int stage, const KiriLayoutFacts& f) {
  if (!f.stages.empty()) {
    KIRI_CHECK(static_cast<int>(f.stages.size()) == pp, "kiri layout facts: ", f.stages.size(),
               " stages for pp = ", pp);
    return f.stages[static_cast<size_t>(stage)];
  }
  int64_t first = 0;
  for (int s = 0; s < stage; ++s) first += layers_on_stage(m.n_layer, pp, s);
  return {first, first + layers_on_stage(m.n_layer, pp, stage)};
}

}  // namespace

std::vector<int64_t> kiri_parameter_groups(const ModelSpec& m, int tp, int pp, int stage,
                                           StageBlocks blocks) {
  KIRI_CHECK_KIND(kConfig, !m.params_only(),
                  "kiri's exact layout needs a model of known dimensions, not a parameter count");
  const bool llama = m.arch == Arch::kLlama;
  const int64_t h = m.hidden, wte = kiri_wte_rows(m, tp) * h;
  std::vector<int64_t> g;
  g.push_back(stage == 0 ? wte + (llama ? 0 : m.max_seq * h) : 0);  // RoPE: no position table
  for (int64_t b = blocks.first; b < blocks.end; ++b) g.push_back(kiri_block_params(m, tp));
  int64_t last = 0;
  // The final norm; an untied head ([V/t, h], vocab parallel), or a tied one's copy of wte
  // when the last stage is not the first.
  const bool head = !kiri_tied(m) || stage > 0;
  if (stage == pp - 1) last = m.final_norm_params() + (head ? wte : 0);
  g.push_back(last);
  return g;
}

std::vector<int64_t> kiri_units(const std::vector<int64_t>& groups, int pp, int wrap_blocks) {
  if (pp > 1) return groups;
  KIRI_CHECK(groups.size() >= 2 && wrap_blocks >= 1, "kiri units: ", groups.size(),
             " groups, wrap_blocks ", wrap_blocks);
  std::vector<int64_t> units{groups.front()};
  const size_t blocks = groups.size() - 2;
  for (size_t b = 0; b < blocks; b += static_cast<size_t>(wrap_blocks)) {
    int64_t u = 0;
    for (size_t i = b; i < std::min(blocks, b + static_cast<size_t>(wrap_blocks)); ++i)
      u += groups[1 + i];
    units.push_back(u);
  }
  units.push_back(groups.back());
  return units;
}

MemoryBreakdown kiri_model_state_bytes(const std::vector<int64_t>& units, Precision dtype,
                                       int zero_stage, int n) {
  KIRI_CHECK_KIND(kConfig, zero_stage >= 0 && zero_stage <= 3, "ZeRO stage must be 0-3, got ",
                  zero_stage);
  KIRI_CHECK_KIND(kConfig, n >= 1, "the shard group must have at least 1 rank, got ", n);
  int64_t psi = 0, padded = 0;
  for (int64_t u : units) {
    psi += u;
    padded += (u + n - 1) / n * n;
  }
  const StateBytesPerParam k = state_bytes_per_param(dtype);
  const auto d = static_cast<double>(k.parameters);
  MemoryBreakdown m;
  if (zero_stage == 0) {
    const auto p = static_cast<double>(psi);
    m.parameters = d * p;
    m.gradients = d * p;
    m.optimizer_states = k.optimizer_states() * p;
    return m;
  }
  const auto p = static_cast<double>(padded), shard = static_cast<double>(padded / n);
  m.parameters = d * (zero_stage >= 3 ? shard : p);
  m.gradients = d * (zero_stage >= 2 ? shard : p);
  m.optimizer_states = k.optimizer_states() * shard;
  return m;
}

namespace {

// kiri's activations at the moments of backward, fp32 elements.
struct KiriActivations {
  double saved = 0;       // of the micro-batches in flight, at the start of backward
  double kept_block = 0;  // what one block of one micro-batch keeps of it
  double block_work = 0;  // a block's backward working set
  double head = 0;        // the LM head's backward working set (last stage)
};

// One block of one micro-batch, fp32 elements (a 16-bit element counts half): what it saves
// for backward (less the norms' statistics and the log-sum-exp) and the working set of its
// backward beyond that.
struct KiriBlock {
  double saved = 0, work = 0;
};

// What selective recomputation drops (none under the other modes).
RecomputeModules dropped_modules(const Layout& l) {
  return l.activation_checkpointing == Recompute::kSelective ? l.modules : RecomputeModules{};
}

// GPT-2's: what it saves is kiri_layer_activations (memory.h; docs/parallelism.md's table) less
// its input, the norms' statistics and the log-sum-exp, which kiri_activations adds. Backward:
// dy, dx1, dh, dprev and the MLP's two [n, 4c/t] gradients, the larger of the MLP's and the
// attention's working sets; under selective recomputation + what the block recomputes.
KiriBlock gpt_block(const Layout& l, double c, double heads) {
  const double s = static_cast<double>(l.seq_len), b = static_cast<double>(l.micro_batch);
  const double n = s * b, t = l.tp;
  const bool sp = l.sequence_parallel;
  const KiriLayerActivations none =
      kiri_layer_activations(s, b, c, heads, l.tp, sp, Recompute::kNone, l.dtype);
  const KiriLayerActivations k = kiri_layer_activations(
      s, b, c, heads, l.tp, sp, Recompute::kSelective, l.dtype, dropped_modules(l));
  return {(k.total() - k.input - k.norm_stats - k.lse) / 4,
          4 * n * c + 8 * n * c / t + (none.total() - none.lse - (k.total() - k.lse)) / 4};
}

// Llama's (nn/llama_layers.cpp), kv the key/value width, f the SwiGLU width: whole, the input,
// the two RMSNorms' outputs (the projections' input) and x1 (4nc); cut by t the RoPE'd q (in
// place), k, v, the attention output, gate, up and silu(gate)·up (n(2c + 2kv + 3f)/t). Under
// mixed precision the norms' outputs are kept as one shared 16-bit copy each (2nc -> nc), and
// o_proj's and down_proj's inputs as 16-bit copies, the attention output beside its fp32 one
// (+0.5nc/t), silu(gate)·up instead of it (nf/t -> 0.5nf/t). Backward: dy, dx1, dh and dprev
// (4nc) and, at the MLP, dh [n, f/t], dgate and dup (3nf/t), down_proj's input freed; at the
// attention (the MLP's half freed: x1, norm 2's output and 1/rms, gate, up, silu·up) datt, dq,
// dk and dv (n(2c + 2kv)/t).
KiriBlock llama_block(const ModelSpec& m, double n, double t, double q, bool fp32,
                      RecomputeModules drop) {
  const double c = static_cast<double>(m.hidden), kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn_width());
  const double norm_out = fp32 ? 2 * n * c : n * c, att_copy = fp32 ? 0 : 0.5 * n * c / t;
  const double down_in = fp32 ? n * f / t : 0.5 * n * f / t;  // silu(gate)·up as down_proj keeps it
  const double mlp = 2 * n * f / t + down_in;                 // + gate, up
  KiriBlock b;
  // q: sequence parallelism keeps this rank's rows of x1 (and of the input, added by the caller).
  b.saved = n * c / q + norm_out + n * (2 * c + 2 * kv) / t + att_copy + mlp;
  const double mlp_half = n * c / q + norm_out / 2 + n / q + mlp;
  b.work = 4 * n * c + std::max(3 * n * f / t - down_in, n * (2 * c + 2 * kv) / t - mlp_half);
  // Selective: the norms' outputs, the activation's output and (mixed precision) the core's
  // fp32 output are not kept; the block in backward holds them again.
  const double dropped = (drop.layernorm ? norm_out : 0) + (drop.mlp_act ? down_in : 0) +
                         (drop.core_attn && !fp32 ? n * c / t : 0);
  b.saved -= dropped;
  b.work += dropped;
  return b;
}

KiriActivations kiri_activations(const ModelSpec& model, const Layout& l, int stage,
                                 StageBlocks blocks) {
  // n tokens of a micro-batch, c the width, c/t a tensor-parallel rank's share of it.
  const double t = l.tp, n = static_cast<double>(l.micro_batch * l.seq_len);
  const double c = static_cast<double>(model.hidden), heads = static_cast<double>(model.heads);
  const double v = static_cast<double>(kiri_wte_rows(model, l.tp));
  const double layers = static_cast<double>(blocks.end - blocks.first);
  const bool full = l.activation_checkpointing == Recompute::kFull,
             llama = model.arch == Arch::kLlama;
  const bool fp32 = l.dtype == Precision::kFp32;
  // Sequence parallelism: the residual stream (each block's input, x1) and the norms hold
  // n / q of the rows.
  const double q = l.sequence_parallel ? t : 1;
  // Per token the norms' statistics (LayerNorm a mean and 1/σ, RMSNorm 1/rms, two norms),
  // and the attention's log-sum-exp per query head.
  const double norm_stats = llama ? 1 : 2;
  const double lse = static_cast<double>(l.micro_batch) * heads / t * l.seq_len;
  const bool keep_lse = !dropped_modules(l).core_attn;  // core_attn recomputes it
  const double stats = 2 * norm_stats * n / q + (keep_lse ? lse : 0);
  KiriBlock blk =
      llama ? llama_block(model, n, t, q, fp32, dropped_modules(l)) : gpt_block(l, c, heads);
  if (!keep_lse) blk.work += lse;
  const double saved_block = n * c / q + blk.saved + stats;  // + its input
  KiriActivations a;
  a.kept_block = full ? n * c / q : saved_block;
  const double in_flight = layers_in_flight(l, blocks.end - blocks.first, stage) /
                           std::max(1.0, layers);  // micro-batches
  // The stage's saved activations of all micro-batches in flight (+ the last block's output,
  // the next stage's / ln_f's input).
  a.saved = in_flight * (layers * a.kept_block + n * c / q);
  a.block_work = blk.work;
  if (full) a.block_work += saved_block - n * c / q;
  // The head (last stage): ln_f's output and statistics, the [n, V/t] logits (their gradient
  // in place), losses, lse, dloss, dxf; logits of all micro-batches in flight under GPipe.
  if (stage == l.pp - 1) {
    const double logits_mb = l.pp > 1 && l.schedule == Schedule::kGpipe
                                 ? static_cast<double>(l.step_microbatches())
                                 : 1.0;
    a.head = logits_mb * (n * v + n * c + (norm_stats / q + 3) * n) + n * c;
    if (l.dtype != Precision::kFp32) a.head += n * v / 2 + n * c / 2;  // 16-bit copies
  }
  return a;
}

// One moment of backward: bytes of activations and of ZeRO's buffers live then.
struct Moment {
  double activations = 0, zero_buffers = 0;
  double total() const { return activations + zero_buffers; }
};

// The peak of a pp = 1 backward under ZeRO (parallel/shard/sharded.h's schedule), the
// largest of: the LM head's backward, and the first block of each block unit's backward
// (less the later blocks' activations; this unit's full gradient, the reductions in flight,
// each a full gradient and its shard (stage 1: the shard, last micro-batch); stage 3 also
// this unit gathered and the prefetched next). A tied head is unit 0 (the embeddings):
// backward starts with it and keeps it to the end, so its full gradient (stages 2-3) and
// its gathered values (stage 3) are live at every moment, and the head prefetches the final
// unit. An untied head is the final unit: its full gradient and values at the head, and the
// head prefetches the last block unit; the embeddings come back last, after every block.
// Without data parallelism (dp 1) a reduction is a copy, done when it starts: none is in flight.
Moment kiri_zero_peak(const KiriActivations& a, const std::vector<int64_t>& units, int stage, int n,
                      double d, int wrap_blocks, int64_t layers, bool tied, bool alone) {
  auto pad = [n](int64_t u) { return static_cast<double>((u + n - 1) / n * n); };
  const double emb = tied ? pad(units.front()) : 0, head_unit = tied ? emb : pad(units.back());
  const double grads = stage >= 2 ? 1 : 0, gathered = stage == 3 ? 1 : 0;
  const double prefetched = pad(units[tied ? units.size() - 1 : units.size() - 2]);
  Moment best{4 * (a.saved + a.head), d * (head_unit * (grads + gathered) + gathered * prefetched)};
  std::vector<double> reducing{pad(units.back())};  // finished units, newest last
  const int last_block_unit = static_cast<int>(units.size()) - 2;
  for (int u = last_block_unit; u >= 1; --u) {
    const double here = pad(units[static_cast<size_t>(u)]);
    double buf = d * (grads * (emb + here) + gathered * (emb + here));
    if (u > 1 || !tied) buf += d * gathered * pad(units[static_cast<size_t>(u - 1)]);
    const size_t cap = alone ? 0 : static_cast<size_t>(kInflightReductions);
    const size_t flying = std::min(reducing.size(), cap);
    for (size_t k = reducing.size() - flying; k < reducing.size(); ++k)
      buf += d * (grads * reducing[k] + reducing[k] / n);
    const int64_t done = layers - std::min<int64_t>(layers, int64_t{u} * wrap_blocks);
    const Moment m{4 * (a.saved - static_cast<double>(done) * a.kept_block + a.block_work), buf};
    if (m.total() > best.total()) best = m;
    reducing.push_back(here);
  }
  return best;
}

}  // namespace

MemoryBreakdown rank_memory_exact(const ModelSpec& model, const Layout& l, int stage,
                                  const KiriLayoutFacts& facts) {
  KIRI_CHECK(stage >= 0 && stage < l.pp, "stage ", stage, " of ", l.pp);
  const StageBlocks blocks = stage_blocks(model, l.pp, stage, facts);
  const std::vector<int64_t> groups = kiri_parameter_groups(model, l.tp, l.pp, stage, blocks);
  const std::vector<int64_t> units = kiri_units(groups, l.pp, l.wrap_blocks);
  MemoryBreakdown m = kiri_model_state_bytes(units, l.dtype, l.zero_stage, l.shard_size());
  const KiriActivations a = kiri_activations(model, l, stage, blocks);
  const int n_shard = l.shard_size();
  int64_t state_numel = 0, unit_shard = 0;
  for (int64_t u : units) {
    const int64_t shard = (u + n_shard - 1) / n_shard;  // the padded unit's shard
    state_numel += l.zero_stage == 0 ? u : shard;
    unit_shard = std::max(unit_shard, shard);
  }

  // Buffers: the step's token rows (the trainer's inputs and targets, int32, m micro-batches,
  // and one micro-batch each for evaluation), pipeline send/receive of [n, c], and ZeRO's.
  const double n = static_cast<double>(l.micro_batch * l.seq_len);
  double buffers = 4 * (2 * n * static_cast<double>(l.step_microbatches()) + 2 * n);
  if (l.pp > 1) buffers += 4 * 2 * n * static_cast<double>(model.hidden);
  // pp > 1 (stage 0 or 1): stage 1 reduces after the pipeline, when the activations are gone.
  if (l.zero_stage == 0 || l.pp > 1) {
    m.activations = 4 * (a.saved + std::max(a.head, a.block_work));
    m.buffers = buffers;
    apply_offload(m, l, static_cast<double>(state_numel), static_cast<double>(unit_shard));
    return m;
  }
  const Moment peak =
      kiri_zero_peak(a, units, l.zero_stage, l.shard_size(), value_bytes(l.dtype), l.wrap_blocks,
                     blocks.end - blocks.first, kiri_tied(model), l.dp == 1);
  m.activations = peak.activations;
  m.buffers = buffers + peak.zero_buffers;
  apply_offload(m, l, static_cast<double>(state_numel), static_cast<double>(unit_shard));
  return m;
}

}  // namespace kiri::plan
