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

int64_t kiri_block_params(int64_t h, int tp) {
  // c_attn [3h/t, h] + 3h/t, c_proj [h, h/t] + h, c_fc [4h/t, h] + 4h/t, c_proj [h, 4h/t] + h,
  // two LayerNorms 4h.
  return (12 * h * h + 7 * h) / tp + 6 * h;
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
  KIRI_CHECK_KIND(kConfig, m.arch == Arch::kGpt2 && !m.params_only(),
                  "kiri's exact layout needs a GPT-2 model of known dimensions");
  const int64_t h = m.hidden, wte = kiri_wte_rows(m, tp) * h;
  std::vector<int64_t> g;
  g.push_back(stage == 0 ? wte + m.max_seq * h : 0);
  for (int64_t b = blocks.first; b < blocks.end; ++b) g.push_back(kiri_block_params(h, tp));
  int64_t last = 0;
  if (stage == pp - 1) last = 2 * h + (stage > 0 ? wte : 0);
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

KiriActivations kiri_activations(const ModelSpec& model, const Layout& l, int stage,
                                 StageBlocks blocks) {
  // n tokens of a micro-batch, c the width, c/t a tensor-parallel rank's share of it.
  const double t = l.tp, n = static_cast<double>(l.micro_batch * l.seq_len);
  const double c = static_cast<double>(model.hidden), heads = static_cast<double>(model.heads);
  const double v = static_cast<double>(kiri_wte_rows(model, l.tp));
  const double layers = static_cast<double>(blocks.end - blocks.first);
  // What a block saves (docs/zero.md): its input, ln_1/ln_2 outputs, x1 (4nc, whole) + qkv,
  // attention output, MLP hidden pre/post-GELU (12nc/t) + LayerNorm statistics 4n + lse.
  const bool full = l.recompute == Recompute::kFull;
  const double stats = 4 * n + static_cast<double>(l.micro_batch) * heads / t * l.seq_len;
  // Under mixed precision each linear layer keeps the 16-bit copy of its input (nn::Linear)
  // instead of the input: ln_1's and ln_2's outputs (2nc -> nc) and the MLP's GELU output
  // (4nc/t -> 2nc/t) are kept only so; the attention output is kept whole by the attention
  // and as c_proj's copy too (+0.5nc/t).
  const double saved_block = l.dtype == Precision::kFp32 ? 4 * n * c + 12 * n * c / t + stats
                                                         : 3 * n * c + 10.5 * n * c / t + stats;
  KiriActivations a;
  a.kept_block = full ? n * c : saved_block;
  const double in_flight = layers_in_flight(l, blocks.end - blocks.first, stage) /
                           std::max(1.0, layers);  // micro-batches
  // The stage's saved activations of all micro-batches in flight (+ the last block's output,
  // the next stage's / ln_f's input).
  a.saved = in_flight * (layers * a.kept_block + n * c);
  // Backward of a block: the recomputed block (full), dy, dx1, dh, dprev and the MLP's
  // [n, 4c/t] gradients (two) — the larger of the MLP's and attention's working sets.
  a.block_work = 4 * n * c + 8 * n * c / t;
  if (full) a.block_work += saved_block - n * c;
  // The head (last stage): ln_f's output and statistics, the [n, V/t] logits (their gradient
  // in place), losses, lse, dloss, dxf; logits of all micro-batches in flight under GPipe.
  if (stage == l.pp - 1) {
    const double logits_mb =
        l.pp > 1 && l.schedule == Schedule::kGpipe ? static_cast<double>(l.microbatches()) : 1.0;
    a.head = logits_mb * (n * v + n * c + 5 * n) + n * c;
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
// largest of: the LM head's backward (stages 2-3: the embeddings' full gradient; stage 3
// also the gathered embeddings and the prefetched final unit), and the first block of each
// block unit's backward (less the later blocks' activations; the embeddings' and this
// unit's full gradients, the reductions in flight, each a full gradient and its shard
// (stage 1: the shard, last micro-batch); stage 3 also the gathered embeddings, this unit
// and the prefetched next).
Moment kiri_zero_peak(const KiriActivations& a, const std::vector<int64_t>& units, int stage, int n,
                      double d, int wrap_blocks, int64_t layers) {
  auto pad = [n](int64_t u) { return static_cast<double>((u + n - 1) / n * n); };
  const double emb = pad(units.front());
  const double grads = stage >= 2 ? 1 : 0, gathered = stage == 3 ? 1 : 0;
  Moment best{4 * (a.saved + a.head), d * emb * (grads + gathered)};
  best.zero_buffers += d * gathered * pad(units.back());
  std::vector<double> reducing{pad(units.back())};  // finished units, newest last
  const int last_block_unit = static_cast<int>(units.size()) - 2;
  for (int u = last_block_unit; u >= 1; --u) {
    const double here = pad(units[static_cast<size_t>(u)]);
    double buf = d * (grads * (emb + here) + gathered * (emb + here));
    if (u > 1) buf += d * gathered * pad(units[static_cast<size_t>(u - 1)]);
    const size_t flying = std::min(reducing.size(), static_cast<size_t>(kInflightReductions));
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
  double buffers = 4 * (2 * n * static_cast<double>(l.microbatches()) + 2 * n);
  if (l.pp > 1) buffers += 4 * 2 * n * static_cast<double>(model.hidden);
  // pp > 1 (stage 0 or 1): stage 1 reduces after the pipeline, when the activations are gone.
  if (l.zero_stage == 0 || l.pp > 1) {
    m.activations = 4 * (a.saved + std::max(a.head, a.block_work));
    m.buffers = buffers;
    apply_offload(m, l, static_cast<double>(state_numel), static_cast<double>(unit_shard));
    return m;
  }
  const Moment peak = kiri_zero_peak(a, units, l.zero_stage, l.shard_size(), value_bytes(l.dtype),
                                     l.wrap_blocks, blocks.end - blocks.first);
  m.activations = peak.activations;
  m.buffers = buffers + peak.zero_buffers;
  apply_offload(m, l, static_cast<double>(state_numel), static_cast<double>(unit_shard));
  return m;
}

}  // namespace kiri::plan
