#include "kiri/plan/time.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kiri/base/error.h"
#include "kiri/plan/memory.h"

namespace kiri::plan {

double narayanan_flops(double B, double s, double L, double h, double V, bool full_recompute) {
  if (full_recompute) return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
  return 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
}

double six_n_flops(double params, double tokens) {
  return 6 * params * tokens;
}

namespace {

// What selective recomputation recomputes (none under the other modes).
RecomputeModules selective_modules(const Layout& l) {
  return l.activation_checkpointing == Recompute::kSelective ? l.modules : RecomputeModules{};
}

// A block's recomputed FLOPs per token (matmul, attention: its forward's per token). Full:
// the forward. Selective: the paper form's one of attention's s-terms; kiri's core_attn the
// attention's forward. kiri's attention recomputes the scores QKᵀ in backward in every mode
// (it saves only the log-sum-exp), as the paper form's selective does.
double recomputed_block_flops(const Layout& l, double matmul, double attention) {
  if (l.activation_checkpointing == Recompute::kFull) return matmul + attention;
  if (l.form == ActivationForm::kKiri)
    return attention / 2 + (selective_modules(l).core_attn ? attention : 0);
  // FlashAttention's backward recomputes QKᵀ (half of the attention's 4·s·h), as selective does.
  const bool flash = l.attention() == Attention::kFlash;
  return l.activation_checkpointing == Recompute::kSelective || flash ? attention / 2 : 0;
}

// Selective's elementwise recomputation per token × hidden, in the bytes kActivationBytes
// prices a block's elementwise work in (16-bit): layernorm the two norms' forwards (read x,
// write the output: 2 × 4, whole on every tp rank), mlp_act GELU's (read and write [4h]: 16,
// cut by tp). core_attn's is its FLOPs (recomputed_block_flops).
double selective_elementwise(const Layout& l) {
  const RecomputeModules r = selective_modules(l);
  return (r.layernorm ? 8.0 : 0.0) + (r.mlp_act ? 16.0 / l.tp : 0.0);
}

}  // namespace

StepFlops step_flops(const ModelSpec& m, const Layout& l) {
  StepFlops f;
  if (m.params_only()) return f;
  const double tokens = static_cast<double>(l.global_batch) * static_cast<double>(l.seq_len);
  const double s = static_cast<double>(l.seq_len), h = static_cast<double>(m.hidden);
  const double L = static_cast<double>(m.n_layer);
  const double matmul = 2 * static_cast<double>(m.layer_matmul_params());
  const double attention = 4 * s * h;  // QKᵀ and attention·V, 2·s·h each per token
  const double forward = tokens * (L * (matmul + attention) + 2 * h * static_cast<double>(m.vocab));
  f.model = 3 * forward;
  f.executed = f.model;
  f.executed += tokens * L * recomputed_block_flops(l, matmul, attention);
  return f;
}

double bubble_fraction(int p, int64_t m, int v) {
  return static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
}

double bubble_overhead(int p, int64_t m, int v) {
  return static_cast<double>(p - 1) / static_cast<double>(v * m);
}

double allreduce_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) * link.latency + 2.0 * (n - 1) / n * bytes / link.bandwidth;
}

double reduce_scatter_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  return (n - 1) * link.latency + static_cast<double>(n - 1) / n * bytes / link.bandwidth;
}

double all_gather_seconds(double bytes, int n, const Link& link) {
  return reduce_scatter_seconds(bytes, n, link);
}

double p2p_seconds(double bytes, const Link& link) {
  return link.latency + bytes / link.bandwidth;
}

Link group_link(const ClusterSpec& cluster, int64_t span) {
  return span <= cluster.devices_per_node ? cluster.intra : cluster.inter;
}

Link group_link(const ClusterSpec& c, int64_t size, int64_t stride) {
  const int64_t per_node = c.devices_per_node;
  if (size * stride <= per_node) return c.intra;
  // Members of one group on a node, and the groups of this kind with members there: all of
  // them run their collective at once and share the node's NICs.
  const int64_t members = std::clamp<int64_t>(per_node / stride, 1, size);
  const double groups = static_cast<double>(std::max<int64_t>(1, per_node / members));
  const double nics = std::min(static_cast<double>(members), c.nics() / groups);
  return {std::min(c.intra.bandwidth, c.inter.bandwidth * nics), c.inter.latency};
}

std::vector<StageBlocks> pipeline_chunks(const ModelSpec& model, const Layout& l,
                                         const KiriLayoutFacts& facts) {
  const int v = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
  const int64_t chunks = int64_t{l.pp} * v, L = model.n_layer;
  if (static_cast<int64_t>(facts.stages.size()) == chunks) return facts.stages;
  std::vector<int64_t> counts(chunks);
  if (l.form == ActivationForm::kPaper || chunks == 1 || chunks > L) {
    for (int64_t c = 0; c < chunks; ++c)
      counts[c] = layers_on_stage(L, static_cast<int>(chunks), static_cast<int>(c));
  } else {
    // kiri's costs (parallel::pp::gpt_layer_costs, up to a common factor): a block
    // 2·matmul + 4sh, the embedding h, the head 2hV. cost[c][i]: the lowest possible cost of
    // the costliest chunk when blocks [0, i) form c + 1 chunks of at least one block each.
    const double h = static_cast<double>(model.hidden), s = static_cast<double>(l.seq_len);
    const double block = 2.0 * static_cast<double>(model.layer_matmul_params()) + 4 * s * h;
    const double emb = h, head = 2 * h * static_cast<double>(model.vocab);
    auto chunk_cost = [&](int64_t c, int64_t a, int64_t b) {
      return static_cast<double>(b - a) * block + (c == 0 ? emb : 0) + (c == chunks - 1 ? head : 0);
    };
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> cost(chunks, std::vector<double>(L + 1, inf));
    std::vector<std::vector<int64_t>> from(chunks, std::vector<int64_t>(L + 1, 0));
    for (int64_t i = 1; i <= L; ++i) cost[0][i] = chunk_cost(0, 0, i);
    for (int64_t c = 1; c < chunks; ++c)
      for (int64_t i = c + 1; i <= L; ++i)
        for (int64_t j = c; j < i; ++j) {
          const double x = std::max(cost[c - 1][j], chunk_cost(c, j, i));
          if (x < cost[c][i]) cost[c][i] = x, from[c][i] = j;
        }
    for (int64_t c = chunks - 1, i = L; c >= 0; --c) {
      const int64_t j = c > 0 ? from[c][i] : 0;
      counts[c] = i - j;
      i = j;
    }
  }
  std::vector<StageBlocks> out;
  for (int64_t c = 0, first = 0; c < chunks; first += counts[c], ++c)
    out.push_back({first, first + counts[c]});
  return out;
}

double peak_flops(const ClusterSpec& c, Precision p) {
  if (p == Precision::kFp32) return c.flops_fp32;
  return p == Precision::kFp16 && c.flops_fp16 > 0 ? c.flops_fp16 : c.flops_16bit;
}

double sustained_flops(const ClusterSpec& c, Precision p) {
  // A measured 16-bit GEMM above its measured peak is noise in one of the two (on a CPU without
  // bf16 dot products both run vfmadd231ps, timed apart): MFU stays <= 1, as efficiency's clamp
  // keeps it for fp32.
  if (p != Precision::kFp32 && c.sustained_16bit > 0)
    return std::min(c.sustained_16bit, peak_flops(c, p));
  return peak_flops(c, p) * c.efficiency;
}

namespace {

// A block's elementwise work per token × hidden relative to GPT's, which kActivationBytes
// prices as four passes over Korthikanti's 34 bytes: a LLaMA block's stored bytes in the
// same accounting, (12h + 4kv + 6f)/h (docs/planner.md, "LLaMA's activations"), over 34.
double elementwise_scale(const ModelSpec& m) {
  if (m.arch != Arch::kLlama) return 1;
  const double h = static_cast<double>(m.hidden), kv = static_cast<double>(m.kv_width());
  const double f = static_cast<double>(m.ffn_width());
  return (12 * h + 4 * kv + 6 * f) / (34 * h);
}

// One micro-batch's forward + backward of each chunk on one tp rank (module comment).
std::vector<double> chunk_seconds(const ModelSpec& model, const Layout& l, const ClusterSpec& c,
                                  const std::vector<StageBlocks>& chunks) {
  const double t = l.tp, tokens = static_cast<double>(l.micro_batch * l.seq_len);
  const double s = static_cast<double>(l.seq_len), h = static_cast<double>(model.hidden);
  const double V = static_cast<double>((model.vocab + l.tp - 1) / l.tp * l.tp);
  const double rate = sustained_flops(c, l.dtype);
  const double matmul = 2 * static_cast<double>(model.layer_matmul_params()), att = 4 * s * h;
  const double block_flops = 3 * (matmul + att) + recomputed_block_flops(l, matmul, att);
  // About half of a block's elementwise work (LayerNorms, residuals) is whole on every tp
  // rank, the rest (GELU, attention, the cut biases) is cut; full recomputation redoes the
  // forward's third.
  const double block_other =
      h * c.non_gemm.activation_s * (1 + 1 / t) / 2 *
          (l.activation_checkpointing == Recompute::kFull ? 4.0 / 3 : 1.0) *
          elementwise_scale(model) +
      h * c.non_gemm.activation_s * selective_elementwise(l) / kActivationBytes;
  const double block_s = tokens * (block_flops / t / rate + block_other);
  // tp 1 trains with the one-pass loss, tp > 1 with the vocab-parallel pair.
  const double logit_s = l.tp > 1 ? c.non_gemm.logit_split_s : c.non_gemm.logit_s;
  const double head_s = tokens * (3 * 2 * h * V / t / rate + V / t * logit_s);
  std::vector<double> out;
  for (size_t k = 0; k < chunks.size(); ++k)
    out.push_back(static_cast<double>(chunks[k].end - chunks[k].first) * block_s +
                  (k + 1 == chunks.size() ? head_s : 0.0));
  return out;
}

// The disk traffic of offload and what of it compute does not hide (TimeBreakdown's
// fields). `forward_backward_s` is the busiest stage's forward and backward of the step,
// `first_forward_s` its forward of one micro-batch: the update runs under it (the next
// forward updates each unit just before using it: docs/offload.md, "Overlap across steps").
void offload_io(const ModelSpec& model, const Layout& l, const ClusterSpec& c,
                double forward_backward_s, double first_forward_s, TimeBreakdown& t) {
  if (!l.offload.any()) return;
  KIRI_CHECK_KIND(kConfig, c.disk.read_bandwidth > 0 && c.disk.write_bandwidth > 0,
                  "the cluster's disk bandwidth must be positive to time offload, got read ",
                  c.disk.read_bandwidth, ", write ", c.disk.write_bandwidth, " bytes/s");
  double psi = 0;
  for (int s = 0; s < l.pp; ++s) psi = std::max(psi, stage_params(model, l.tp, l.pp, s));
  const double n = l.shard_size();
  const double states = l.zero_stage >= 1 ? psi / n : psi;
  const double opt = l.offload.optimizer == OffloadTarget::kNvme
                         ? state_bytes_per_param(l.dtype).optimizer_states() * states
                         : 0;
  const double par = l.offload.parameters == OffloadTarget::kNvme
                         ? value_bytes(l.dtype) * (l.zero_stage >= 3 ? psi / n : psi)
                         : 0;
  // Gradient offload: each micro-batch's backward writes the gradient shard, the ones after
  // the first read the partial sum back first, and the update reads the final one.
  const double grad = l.offload.gradients == OffloadTarget::kNvme
                          ? value_bytes(l.dtype) * (l.zero_stage >= 2 ? psi / n : psi)
                          : 0;
  const double m = static_cast<double>(l.step_microbatches());
  // The node's disk is shared by the ranks on it.
  const double sharing = std::min<double>(l.world(), c.devices_per_node);
  const double rd = c.disk.read_bandwidth / sharing, wr = c.disk.write_bandwidth / sharing;
  t.disk_read_bytes = opt + 2 * par + m * grad;
  t.disk_write_bytes = opt + par + m * grad;
  t.disk_read_s = t.disk_read_bytes / rd;
  t.disk_write_s = t.disk_write_bytes / wr;
  // The update: the states stream through it (and the new parameters are written).
  const double update_io = (opt + grad) / rd + (opt + par) / wr;
  // Under forward and backward: the parameter shards read ahead, the gradients' traffic.
  const double under_compute_io = 2 * par / rd + (m - 1) * grad / rd + m * grad / wr;
  t.io_exposed_s = std::max(0.0, update_io - t.optimizer_s - first_forward_s) +
                   std::max(0.0, under_compute_io - forward_backward_s);
}

// A data-parallel collective's group: its link and size, and whether its time can hide behind
// compute: collectives that cross nodes wait on the wire (the NIC moves the bytes while the
// cores compute); inside a node they hide only where the cluster's collectives do not run
// on the computing cores (GPUs; CPU ranks' shared-memory copies do).
struct DpGroup {
  Link link;
  int n = 1;
  bool hides = false;
};

DpGroup dp_group(const ClusterSpec& c, int64_t size, int64_t stride) {
  return {group_link(c, size, stride), static_cast<int>(size),
          c.comm_overlaps_compute || size * stride > c.devices_per_node};
}

// Data parallelism's communication: all of it (dp_comm_total_s), and what backward does not
// hide (dp_comm_s). DDP all-reduces bucket by bucket under backward; ZeRO reduce-scatters (and
// all-gathers) unit by unit over the shard group (dp, stride tp), and the replicas of hybrid
// sharding (stride shard · tp) all-reduce their shards.
void dp_comm(const ModelSpec& model, const Layout& l, const ClusterSpec& c, int64_t stage_layers,
             double t_max, const StepFlops& f, TimeBreakdown& t) {
  const double md = static_cast<double>(l.step_microbatches());
  double psi = 0;
  for (int s = 0; s < l.pp; ++s) psi = std::max(psi, stage_params(model, l.tp, l.pp, s));
  const double grads = psi * l.grad_bytes(), values = psi * value_bytes(l.dtype);
  const int n = l.shard_size();
  const DpGroup shard = dp_group(c, n, l.tp), reps = dp_group(c, l.dp / n, int64_t{n} * l.tp);
  const double units = std::ceil(static_cast<double>(stage_layers) / l.wrap_blocks) + 2;
  const double bucket = std::max(1.0, l.bucket_mb * 1024 * 1024);
  const double buckets = std::max(1.0, std::ceil(grads / bucket));
  // Latency counts: one collective per bucket (DDP) or per unit (ZeRO).
  auto rs = [&](double bytes) {
    return reduce_scatter_seconds(bytes, n, shard.link) +
           (units - 1) * (n - 1) * shard.link.latency;
  };
  auto ag = rs;
  const double replicas = n < l.dp ? allreduce_seconds(grads / n, reps.n, reps.link) : 0;
  // What may hide behind forward and behind backward, what runs on the cores (DpGroup::hides
  // false), and what nothing can hide: the last bucket's all-reduce (ready only when backward
  // ends: all of it for one bucket, naive DP), the last unit's reduction, ZeRO-3's first
  // gather (before any compute) and the all-gathers after the step.
  double fwd = 0, bwd = 0, on_cores = 0, exposed = 0;
  auto add = [&](const DpGroup& g, double seconds, double& window, double tail) {
    if (!g.hides) return void(on_cores += seconds);
    exposed += seconds * tail;
    window += seconds * (1 - tail);
  };
  const double unit = 1 / units;
  switch (l.zero_stage) {
    case 0:
      add(shard,
          allreduce_seconds(grads, l.dp, shard.link) +
              (buckets - 1) * 2 * (l.dp - 1) * shard.link.latency,
          bwd, 1 / buckets);
      break;
    case 1:
    case 2: {
      // Stage 1 reduces in the last micro-batch's backward, stage 2 in every one.
      const double times = l.zero_stage == 1 ? 1 : md;
      add(shard, times * rs(grads), bwd, unit / times);
      add(reps, times * replicas, bwd, unit / times);
      exposed += ag(values);
      break;
    }
    default:
      add(shard, md * ag(values), fwd, unit / md);
      add(shard, md * ag(values), bwd, 0);
      add(shard, md * rs(grads), bwd, unit / md);
      add(reps, md * replicas, bwd, unit / md);
      break;
  }
  // Stages 0 and 1 overlap the last micro-batch's backward; 2 and 3 every micro-batch's.
  const double forward_share = f.model / 3 / f.executed, mbs = l.zero_stage >= 2 ? md : 1;
  t.dp_comm_total_s = fwd + bwd + on_cores + exposed;
  if (!l.overlap_dp) {
    t.dp_comm_s = t.dp_comm_total_s;
    return;
  }
  const double fwd_window = md * t_max * forward_share,
               bwd_window = mbs * t_max * (1 - forward_share);
  // The hidden part is not free where the computing cores carry the transfers.
  t.dp_comm_cpu_s =
      c.transfer_compute_share * (std::min(fwd, fwd_window) + std::min(bwd, bwd_window));
  t.dp_comm_s = exposed + on_cores + std::max(0.0, fwd - fwd_window) +
                std::max(0.0, bwd - bwd_window) + t.dp_comm_cpu_s;
}

// Gradient clipping's global norm: a scalar all-reduced over the tp and pp groups, and over
// the shard group once ZeRO has sharded what the norm is summed over; and the loss's mean over
// dp for the log. Latency only (4 bytes each).
double clip_seconds(const Layout& l, const ClusterSpec& c) {
  const int64_t dp_tp = int64_t{l.dp} * l.tp;
  double s = allreduce_seconds(4, l.tp, group_link(c, l.tp, 1)) +
             allreduce_seconds(4, l.pp, group_link(c, l.pp, dp_tp)) +
             allreduce_seconds(4, l.dp, group_link(c, l.dp, l.tp));
  if (l.zero_stage >= 1 && l.shard_size() > 1)
    s += allreduce_seconds(4, l.shard_size(), group_link(c, l.shard_size(), l.tp));
  return s;
}

// tp's collectives and pp's sends of one step (TimeBreakdown::tp_comm_s, pp_comm_s).
void model_parallel_comm(const ModelSpec& model, const Layout& l, const ClusterSpec& c,
                         int64_t stage_layers, TimeBreakdown& t) {
  const int64_t m = l.step_microbatches();
  const double md = static_cast<double>(m);
  const int v = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
  const double tokens_mb = static_cast<double>(l.micro_batch * l.seq_len);
  const double act_bytes = l.form == ActivationForm::kKiri ? 4 : value_bytes(l.dtype);
  const double act = tokens_mb * static_cast<double>(model.hidden) * act_bytes;
  if (l.tp > 1) {
    const double per_layer = l.activation_checkpointing == Recompute::kFull ? 6 : 4;
    const double count = md * (static_cast<double>(stage_layers) * per_layer + 2);
    t.tp_comm_s = count * allreduce_seconds(act, l.tp, group_link(c, l.tp, 1));
    // Sequence parallelism with layernorm recomputed: each region's input gathered again.
    if (l.sequence_parallel && selective_modules(l).layernorm)
      t.tp_comm_s += md * static_cast<double>(stage_layers) * 2 *
                     all_gather_seconds(act, l.tp, group_link(c, l.tp, 1));
  }
  if (l.pp > 1) {
    // Megatron's scatter-gather (the paper form): each tp rank sends its 1/tp of the
    // activation, through its own NIC; without sequence parallelism the receiving stage
    // all-gathers it over tp (with it, the 1/tp is the sequence shard the stage starts from).
    // kiri sends the whole activation from every tp rank.
    const bool scatter = l.form == ActivationForm::kPaper && l.tp > 1;
    const Link link = group_link(c, l.pp, int64_t{l.dp} * l.tp);
    double one = p2p_seconds(scatter ? act / l.tp : act, link);
    if (scatter && !l.sequence_parallel)
      one += all_gather_seconds(act, l.tp, group_link(c, l.tp, 1));
    t.pp_comm_s = 2.0 * static_cast<double>(m) * v * one;
  }
}

}  // namespace

GradientWork gradient_work(const Layout& l, double params) {
  GradientWork g;
  const double shard = params / l.shard_size();
  g.updated = l.zero_stage >= 1 ? shard : params;
  g.norm = g.updated;
  g.fused = l.zero_stage == 0 && l.offload.optimizer == OffloadTarget::kNone;
  if (g.fused) return g;
  if (l.zero_stage <= 1)
    g.zeroed = params;
  else if (l.offload.gradients != OffloadTarget::kNvme)
    g.zeroed = shard;
  return g;
}

TimeBreakdown estimate_time(const ModelSpec& model, const Layout& l, const ClusterSpec& c,
                            const KiriLayoutFacts& facts) {
  TimeBreakdown t;
  if (model.params_only()) return t;
  t.estimated = true;
  const StepFlops f = step_flops(model, l);
  t.flops_per_step = f.executed;
  t.model_flops_per_step = f.model;
  const double world = l.world();
  const double peak = peak_flops(c, l.dtype);
  const int64_t m = l.step_microbatches();
  const double md = static_cast<double>(m);
  const int v = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
  const std::vector<StageBlocks> chunks = pipeline_chunks(model, l, facts);
  std::vector<double> chunk_s = chunk_seconds(model, l, c, chunks);
  // Ranks that share fewer cores than there are ranks compute at cores / ranks of the speed.
  t.compute_slowdown =
      c.shared_cores > 0 ? std::max(1.0, world / static_cast<double>(c.shared_cores)) : 1.0;
  for (double& x : chunk_s) x *= t.compute_slowdown;
  t.stage_s.assign(l.pp, 0.0);
  int64_t stage_layers = 0;
  std::vector<int64_t> blocks(l.pp, 0);
  for (size_t k = 0; k < chunks.size(); ++k) {
    t.stage_s[k % l.pp] += chunk_s[k];
    blocks[k % l.pp] += chunks[k].end - chunks[k].first;
  }
  for (int s = 0; s < l.pp; ++s) {
    stage_layers = std::max(stage_layers, blocks[s]);
    const GradientWork g = gradient_work(l, stage_params(model, l.tp, l.pp, s));
    const double update = g.fused ? c.non_gemm.optimizer_zeroing_s : c.non_gemm.optimizer_s;
    t.optimizer_s = std::max(
        t.optimizer_s, t.compute_slowdown * (g.updated * update + g.norm * c.non_gemm.gradient_s +
                                             g.zeroed * c.non_gemm.zeroing_s));
  }
  const double t_max = *std::max_element(t.stage_s.begin(), t.stage_s.end());
  double sum = 0;
  for (double x : t.stage_s) sum += x;
  t.compute_s = md * t_max + t.optimizer_s;
  if (l.pp > 1) {
    t.bubble_fraction = bubble_fraction(l.pp, m, v);
    t.bubble_s = v == 1 ? sum - t_max : md * t_max * bubble_overhead(l.pp, m, v);
  }
  model_parallel_comm(model, l, c, stage_layers, t);
  if (l.dp > 1) dp_comm(model, l, c, stage_layers, t_max, f, t);
  t.clip_s = clip_seconds(l, c);
  t.overhead_s = c.step_overhead_s;
  t.iteration_s = t.optimizer_s + t.clip_s + t.dp_comm_s + t.overhead_s;
  // Forward is a third of the model FLOPs (6 N per token); recomputation adds to the rest.
  offload_io(model, l, c, md * t_max, t_max * (f.model / 3) / f.executed, t);
  t.step_s = t.compute_s + t.bubble_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s + t.io_exposed_s +
             t.clip_s + t.overhead_s;
  t.tokens_per_s = static_cast<double>(l.global_batch * l.seq_len) / t.step_s;
  t.tflops_per_device = f.executed / world / t.step_s / 1e12;
  t.mfu = f.model / (world * peak * t.step_s);
  return t;
}

}  // namespace kiri::plan
