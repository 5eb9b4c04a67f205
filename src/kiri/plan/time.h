#pragma once
// The time model: FLOPs per step, compute at a sustained per-device rate, communication
// with an α–β model, the pipeline bubble; step time, tokens/s, TFLOP/s per device, MFU.
#include <cstdint>

#include <vector>

#include "kiri/plan/layout.h"
#include "kiri/plan/memory.h"
#include "kiri/plan/specs.h"

namespace kiri::plan {

// Narayanan et al. 2021 (eq. 3): FLOPs of one step of B sequences of s tokens through L
// layers of hidden h and vocabulary V: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)); with full
// activation recomputation 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)).
double narayanan_flops(double B, double s, double L, double h, double V, bool full_recompute);
// The 6·N·D rule: 6 FLOPs per parameter per token.
double six_n_flops(double params, double tokens);

// A device's peak FLOP/s in a precision (MFU's denominator) and the rate its large GEMMs
// sustain (peak · efficiency unless the cluster gives the 16-bit rate itself).
double peak_flops(const ClusterSpec& c, Precision p);
double sustained_flops(const ClusterSpec& c, Precision p);

struct StepFlops {
  double model = 0;     // forward + backward, no recomputation (MFU's numerator)
  double executed = 0;  // what runs: + recomputed forwards
};
// 3 × (per token: L·(2·matmul weights + 4·s·h) + 2·h·V) per token, which is Narayanan's
// formula for GPT (and its generalisation for LLaMA: matmul weights 2h² + 2h·kv_width +
// 3h·ffn with grouped-query attention's smaller k and v, the same 4·s·h of attention over
// the query heads, the head's 2·h·V tied or not); full recomputation adds a
// forward of the blocks, selective one of attention's s-terms; the kiri form adds attention's
// recomputed QKᵀ (kiri saves only the log-sum-exp) as the paper form's selective does, and
// under selective with core_attn the attention's forward 4·s·h (layernorm and mlp_act
// recompute elementwise work only: chunk_seconds prices it).
StepFlops step_flops(const ModelSpec& model, const Layout& layout);

// Bubble share of the pipeline's step: (p − 1)/(v·m + p − 1) (v = 1 unless interleaved),
// and the bubble time over the ideal time: (p − 1)/(v·m).
double bubble_fraction(int p, int64_t m, int v = 1);
double bubble_overhead(int p, int64_t m, int v = 1);

// Collectives over n ranks of `bytes` each (α–β, ring): all-reduce 2(n−1)α + 2(n−1)/n·bytes/β;
// reduce-scatter and all-gather (n−1)α + (n−1)/n·bytes/β; point-to-point α + bytes/β.
double allreduce_seconds(double bytes, int n, const Link& link);
double reduce_scatter_seconds(double bytes, int n, const Link& link);
double all_gather_seconds(double bytes, int n, const Link& link);
double p2p_seconds(double bytes, const Link& link);
// The link of a group whose members span `span` consecutive ranks of the mesh (tp innermost,
// then dp, then pp, as kiri's mesh): a tp group spans tp, a dp group dp·tp, a pp group
// dp·tp·pp. Within a node iff span ≤ devices per node.
Link group_link(const ClusterSpec& cluster, int64_t span);
// The link of a group of `size` members `stride` ranks apart (a tp group: stride 1; a dp or
// shard group: tp; hybrid sharding's replicas: shard · tp; the pp group: dp · tp). Within a
// node: intra. Across nodes its traffic leaves each node through the NICs of its members
// there (k = min(size, devices per node / stride), at least 1), which the g = devices per
// node / k groups of its kind on the node, all communicating at once, share: bandwidth
// min(intra, inter × min(k, NICs / g)), inter's latency. With a NIC per device that is
// min(intra, inter × k), the members per node (Megatron's and NCCL's rings over all NICs).
Link group_link(const ClusterSpec& cluster, int64_t size, int64_t stride);

// The blocks of each pipeline stage (pp·v chunks when interleaved, chunk c on stage c mod
// pp). The paper form: Megatron's even split (layers_on_stage). The kiri form: kiri's own
// cut, which minimises the costliest chunk by FLOPs with the embedding on the first and the
// LM head on the last (parallel/pp/partition.h; this is the same optimum, recomputed here
// because this library cannot see it); `facts.stages`, when given, is taken as is.
std::vector<StageBlocks> pipeline_chunks(const ModelSpec& model, const Layout& layout,
                                         const KiriLayoutFacts& facts = {});

// The gradient work of a step on a rank of `params` parameters (train/step.cpp): the norm
// reads the optimizer's gradients (Ψ, or the shard Ψ/N from ZeRO stage 1); the next step's
// zeroing runs inside the update (AdamW::set_zero_grads, priced as optimizer_zeroing_s) where
// the update reads every gradient zero_grad zeroes: ZeRO stage 0 with the optimizer in memory,
// any dp × tp × pp and accumulation. Elsewhere a pass of its own zeroes the gradient buffers
// the layout keeps: stage 0 under optimizer offload and stage 1 the whole Ψ, stages 2 and 3
// the shard Ψ/N, nothing when those shards live on NVMe (offload.gradients).
struct GradientWork {
  double updated = 0;  // optimizer elements
  double norm = 0;     // gradient elements the norm reads
  double zeroed = 0;   // gradient elements a separate zeroing pass writes
  bool fused = false;  // the update zeroes its gradients (zeroed = 0)
};
GradientWork gradient_work(const Layout& layout, double params);

struct TimeBreakdown {
  bool estimated = false;  // false for a parameter-count-only model
  double flops_per_step = 0, model_flops_per_step = 0;
  // One micro-batch's forward + backward on each pipeline stage (a tp rank of it): its GEMM
  // FLOPs at sustained_flops plus its non-GEMM work (ClusterSpec::non_gemm).
  std::vector<double> stage_s;
  double optimizer_s = 0;  // the slowest stage's optimizer step, gradient norm and zeroing
  double compute_s = 0;    // m · max(stage_s) + optimizer_s: the busiest stage's work
  // Pipeline: (m − 1)·max + Σ stage_s for GPipe and 1F1B (unequal stages included), m·max·
  // (p − 1)/(v·m) interleaved, less the busiest stage's own m·max.
  double bubble_s = 0;
  double bubble_fraction = 0;
  double tp_comm_s = 0;  // 4 all-reduces of [b·s, h] per layer per micro-batch (6 with
                         // full recomputation), + 2 for the embedding and the LM head;
                         // + 2 all-gathers per layer with sequence parallelism and
                         // selective's layernorm (the regions' inputs gathered again)
  double pp_comm_s = 0;  // a send forward and one backward per micro-batch and chunk
                         // (the paper form: 1/tp each, then an all-gather over tp
                         // unless sequence parallel: Megatron's scatter-gather)
  // > 1 when the ranks share fewer cores than there are ranks (ClusterSpec::shared_cores):
  // stage_s and optimizer_s are scaled by it.
  double compute_slowdown = 1;
  double clip_s = 0;      // gradient clipping's norm and the loss's mean: scalar all-reduces
  double overhead_s = 0;  // the cluster's fixed per-step cost (ClusterSpec::step_overhead_s)
  // The fixed per-iteration cost, reported (its parts are in step_s already): the optimizer
  // step, clipping, the gradient reduction not hidden behind backward and the overhead.
  double iteration_s = 0;
  double dp_comm_total_s = 0;  // gradient reduction / ZeRO gathers per step
  double dp_comm_s = 0;        // the part not hidden behind backward (or all when not overlapped)
  // Of dp_comm_s: what the hidden part still takes from compute while it runs
  // (ClusterSpec::transfer_compute_share times the time hidden).
  double dp_comm_cpu_s = 0;
  // Offload (per rank per step, the busiest stage): bytes read from and written to
  // offload.path's disk (optimizer: the states once each way; parameters: the shard read in
  // forward and in backward, written once at the update; gradients: written by each
  // micro-batch's backward, read back by every one after the first and by the update),
  // their time at the rank's share of the node's disk, and the part not hidden behind
  // compute: the update streams the states (max(update, its I/O)), forward and backward
  // read the parameters ahead of their use and move the gradients.
  double disk_read_bytes = 0, disk_write_bytes = 0;
  double disk_read_s = 0, disk_write_s = 0;
  double io_exposed_s = 0;
  double step_s = 0, tokens_per_s = 0, tflops_per_device = 0, mfu = 0;
};
TimeBreakdown estimate_time(const ModelSpec& model, const Layout& layout,
                            const ClusterSpec& cluster, const KiriLayoutFacts& facts = {});

}  // namespace kiri::plan
