#pragma once
// The planner: evaluate one layout, enumerate the layouts of a world, recommend one and
// say which of the five cuts it makes and why.
#include <optional>
#include <string>
#include <vector>

#include "kiri/plan/layout.h"
#include "kiri/plan/memory.h"
#include "kiri/plan/specs.h"
#include "kiri/plan/time.h"

namespace kiri::plan {

struct Evaluation {
  Layout layout;
  RankMemory memory;  // the rank with the largest total (and every stage)
  TimeBreakdown time;
  double capacity = 0;  // the device's memory
  bool fits = false;    // memory.memory.total() <= capacity
  // One layer's activations for one micro-batch under the layout's tp, sequence parallelism,
  // dtype, recompute and form (layer_activation_bytes; docs/parallelism.md's table).
  double layer_activations = 0;
};

// Validates the layout (kConfig) and evaluates it on the cluster's devices.
Evaluation evaluate(const ModelSpec& model, const Layout& layout, const ClusterSpec& cluster);

struct PlanRequest {
  ModelSpec model;
  ClusterSpec cluster;
  int world = 1;  // devices to lay out
  Layout base;    // micro-batch, global batch, sequence, dtype, form, sp, overlap, wrap, offload
  // When base.offload offloads nothing and no layout fits: try optimizer offload, then
  // parameter offload too (the seeds' order: offload only when no layout fits).
  bool offload_if_needed = true;
};

// Every valid layout of the world: dp × tp × pp = world with tp dividing the heads and the
// MLP width and staying within a node, pp ≤ layers; ZeRO 0-3 (1 with pp > 1; 0 when dp = 1);
// recomputation none | full (and selective in the paper form); 1F1B, and interleaved with
// v = 2 where allowed. Sorted: those that fit by step time (ties: less communication
// first), then the rest by total memory.
// A parameter-count-only model: dp = world, ZeRO 0-3.
// Every layout takes base.offload. When that offloads nothing, none fits and
// offload_if_needed: the same layouts with the optimizer states on NVMe are appended, and when
// none of those fits either, ZeRO stage 3 layouts (dp = 1 included) with the parameters on
// NVMe too.
std::vector<Evaluation> enumerate_layouts(const PlanRequest& request);

struct Recommendation {
  // compute | model_states | layer | layers | activations
  std::string bottleneck;
  // data_parallel | zero | tensor_parallel | pipeline_parallel | checkpointing | offload
  std::string cut;
  std::string message;
  std::vector<std::string> reasons;  // one per cut the best layout makes, in the five's order
  std::optional<Evaluation> best;    // the fastest layout that fits, if any
  int min_devices = 0;  // the fewest devices on which pure ZeRO-3 + full recomputation fits
  // When best offloads (and base.offload did not ask for it): best's step time over the
  // same layout's without offload (which does not fit), and that step.
  double offload_slowdown = 0, step_without_offload_s = 0;
};

// The bottleneck of plain data parallelism over the world (dp = world, stage 0, no
// recomputation), checked in this order: it fits → too slow → data parallel; the model
// states do not fit → ZeRO/FSDP (but one layer does not fit even gathered alone → tensor
// parallel); the states fit but not with the activations → checkpointing. `reasons` explain
// each cut of the best layout (data, ZeRO, tensor, pipeline, checkpointing). When the best
// layout offloads that nothing else fit, cut = offload and the message gives its RAM, its
// NVMe bytes and the predicted slowdown.
Recommendation recommend(const PlanRequest& request, const std::vector<Evaluation>& candidates);

// "12.3 GiB" (below 1 GiB "512.0 MiB")
std::string gib(double bytes);
// The candidates as a text table (the first `top`), and one evaluation as text.
std::string format_table(const std::vector<Evaluation>& candidates, size_t top);
std::string format_evaluation(const ModelSpec& model, const ClusterSpec& cluster,
                              const Evaluation& e);

}  // namespace kiri::plan
