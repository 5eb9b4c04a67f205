#include "kiri/plan/time.h"

#include <algorithm>
#include <cmath>

#include "kiri/plan/memory.h"

namespace kiri::plan {

double narayanan_flops(double B, double s, double L, double h, double V, bool full_recompute) {
  if (full_recompute) return 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
  return 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
}

double six_n_flops(double params, double tokens) {
  return 6 * params * tokens;
}

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
  if (l.recompute == Recompute::kFull)
    f.executed += tokens * L * (matmul + attention);
  else if (l.recompute == Recompute::kSelective || l.form == ActivationForm::kKiri)
    f.executed += tokens * L * attention / 2;  // the scores QKᵀ again
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

TimeBreakdown estimate_time(const ModelSpec& model, const Layout& l, const ClusterSpec& c) {
  TimeBreakdown t;
  if (model.params_only()) return t;
  t.estimated = true;
  const StepFlops f = step_flops(model, l);
  t.flops_per_step = f.executed;
  t.model_flops_per_step = f.model;
  const double world = l.world();
  const double peak = l.dtype == Precision::kFp32 ? c.flops_fp32 : c.flops_16bit;
  t.compute_s = f.executed / world / (peak * c.efficiency);
  const int64_t m = l.microbatches();
  const int v = l.schedule == Schedule::kInterleaved ? l.virtual_stages : 1;
  if (l.pp > 1) {
    t.bubble_fraction = bubble_fraction(l.pp, m, v);
    t.bubble_s = t.compute_s * bubble_overhead(l.pp, m, v);
  }
  const double tokens_mb = static_cast<double>(l.micro_batch * l.seq_len);
  const double act_bytes = l.form == ActivationForm::kKiri ? 4 : value_bytes(l.dtype);
  const double act = tokens_mb * static_cast<double>(model.hidden) * act_bytes;
  const double stage_layers = static_cast<double>(layers_on_stage(model.n_layer, l.pp, 0));
  if (l.tp > 1) {
    const double per_layer = l.recompute == Recompute::kFull ? 6 : 4;
    const double count = static_cast<double>(m) * (stage_layers * per_layer + 2);
    t.tp_comm_s = count * allreduce_seconds(act, l.tp, group_link(c, l.tp));
  }
  if (l.pp > 1) {
    const double cut = l.form == ActivationForm::kPaper && l.sequence_parallel ? l.tp : 1;
    t.pp_comm_s = 2.0 * static_cast<double>(m) * v *
                  p2p_seconds(act / cut, group_link(c, int64_t{l.dp} * l.tp * l.pp));
  }
  if (l.dp > 1) {
    double psi = 0;
    for (int s = 0; s < l.pp; ++s) psi = std::max(psi, stage_params(model, l.tp, l.pp, s));
    const double grads = psi * value_bytes(l.dtype);
    const int n = l.shard_size();
    const Link link = group_link(c, int64_t{l.dp} * l.tp);
    const double units = std::ceil(stage_layers / l.wrap_blocks) + 2;
    const double buckets = std::max(1.0, std::ceil(grads / (25.0 * 1024 * 1024)));
    // Latency counts: one collective per bucket (DDP) or per unit (ZeRO).
    auto rs = [&](double bytes) {
      return reduce_scatter_seconds(bytes, n, link) + (units - 1) * (n - 1) * link.latency;
    };
    auto ag = rs;
    const double replicas = n < l.dp ? allreduce_seconds(grads / n, l.dp / n, link) : 0;
    const double md = static_cast<double>(m);
    double overlappable = 0, exposed = 0, window = 0;
    const double per_mb = t.compute_s / md;
    const double backward_share = (f.executed - f.model / 3) / f.executed;
    switch (l.zero_stage) {
      case 0:
        overlappable =
            allreduce_seconds(grads, l.dp, link) + (buckets - 1) * 2 * (l.dp - 1) * link.latency;
        window = per_mb * backward_share;
        break;
      case 1:
        overlappable = rs(grads) + replicas;
        exposed = ag(grads);
        window = per_mb * backward_share;
        break;
      case 2:
        overlappable = md * (rs(grads) + replicas);
        exposed = ag(grads);
        window = t.compute_s * backward_share;
        break;
      default:
        overlappable = md * (2 * ag(grads) + rs(grads) + replicas);
        window = t.compute_s;
        break;
    }
    t.dp_comm_total_s = overlappable + exposed;
    t.dp_comm_s = l.overlap_dp ? exposed + std::max(0.0, overlappable - window) : t.dp_comm_total_s;
  }
  t.step_s = t.compute_s + t.bubble_s + t.tp_comm_s + t.pp_comm_s + t.dp_comm_s;
  t.tokens_per_s = static_cast<double>(l.global_batch * l.seq_len) / t.step_s;
  t.tflops_per_device = f.executed / world / t.step_s / 1e12;
  t.mfu = f.model / (world * peak * t.step_s);
  return t;
}

}  // namespace kiri::plan
