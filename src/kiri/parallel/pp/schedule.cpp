#include "kiri/parallel/pp/schedule.h"

#include <algorithm>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

using Op = Action::Op;

Action fwd(int micro, int chunk = 0) {
  return {Op::kForward, micro, chunk};
}
Action bwd(int micro, int chunk = 0) {
  return {Op::kBackward, micro, chunk};
}

// The layout's pipeline rules (config/layout.h), with or without the layer count.
void validate_shape(PipelineSchedule kind, int p, int m, int v, int n_layer = 0) {
  kiri::Layout l;
  l.pp = p;
  l.schedule = kind;
  l.microbatches = m;
  l.virtual_stages = v;
  kiri::LayoutFacts f;
  f.n_layer = n_layer;
  kiri::validate_layout(l, f);
}

std::vector<Action> gpipe(int m) {
  std::vector<Action> t;
  for (int i = 0; i < m; ++i) t.push_back(fwd(i));
  for (int i = m - 1; i >= 0; --i) t.push_back(bwd(i));
  return t;
}

// Warm-up forwards fill the pipe below this rank: the first backward can only arrive after
// micro 0 has gone through the p - rank - 1 later stages, so that many forwards fit first.
std::vector<Action> one_f_one_b(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  std::vector<Action> t;
  for (int i = 0; i < warmup; ++i) t.push_back(fwd(i));
  for (int i = 0; i < m - warmup; ++i) {
    t.push_back(fwd(warmup + i));
    t.push_back(bwd(i));
  }
  for (int i = m - warmup; i < m; ++i) t.push_back(bwd(i));
  return t;
}

// The k-th forward (or backward) of a rank in the interleaved order: groups of p*v
// consecutive actions take p micro-batches through each local chunk in turn (backwards
// visit the chunks in reverse, since gradients flow from the last chunk).
Action interleaved_action(Op op, int k, int p, int v) {
  const int in_group = k % (p * v);
  const int micro = (k / (p * v)) * p + in_group % p;
  int chunk = in_group / p;
  if (op == Op::kBackward) chunk = v - 1 - chunk;
  return {op, micro, chunk};
}

// Megatron's interleaved schedule. Warm-up: (v-1)*p forwards let micro 0 reach this rank's
// last chunk; 2*(p-rank-1) more cover the round trip through the later ranks' last chunks
// before the first backward comes back. Megatron runs everything as warm-up when m == p;
// the simulator shows the general rule already reaches the same bubble without deadlock
// there (rank 0 is all warm-up anyway), and later ranks then hold fewer micro-batches.
std::vector<Action> interleaved(int p, int m, int v, int rank) {
  const int total = m * v;
  const int warmup = std::min(2 * (p - rank - 1) + (v - 1) * p, total);
  std::vector<Action> t;
  for (int k = 0; k < warmup; ++k) t.push_back(interleaved_action(Op::kForward, k, p, v));
  for (int k = 0; k < total - warmup; ++k) {
    t.push_back(interleaved_action(Op::kForward, warmup + k, p, v));
    t.push_back(interleaved_action(Op::kBackward, k, p, v));
  }
  for (int k = total - warmup; k < total; ++k)
    t.push_back(interleaved_action(Op::kBackward, k, p, v));
  return t;
}

}  // namespace

PipelineSchedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGpipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  if (name == "interleaved") return PipelineSchedule::kInterleaved;
  KIRI_RAISE(kConfig, "parallel.schedule = \"", name,
             "\" is not a pipeline schedule; allowed: gpipe, 1f1b, interleaved");
}

std::string action_str(const Action& a) {
  return kiri::str(a.op == Op::kForward ? "F" : "B", a.micro, ".", a.chunk);
}

std::vector<std::vector<Action>> make_schedule(PipelineSchedule kind, int stages, int microbatches,
                                               int virtual_stages) {
  validate_shape(kind, stages, microbatches, virtual_stages);
  std::vector<std::vector<Action>> tables(stages);
  for (int r = 0; r < stages; ++r) {
    switch (kind) {
      case PipelineSchedule::kGpipe:
        tables[r] = gpipe(microbatches);
        break;
      case PipelineSchedule::k1F1B:
        tables[r] = one_f_one_b(stages, microbatches, r);
        break;
      case PipelineSchedule::kInterleaved:
        tables[r] = interleaved(stages, microbatches, virtual_stages, r);
        break;
    }
  }
  return tables;
}

void validate_pipeline(PipelineSchedule kind, int n_layer, int stages, int microbatches,
                       int virtual_stages) {
  KIRI_CHECK_KIND(kConfig, n_layer >= 1, "model.n_layer = ", n_layer, " must be >= 1");
  validate_shape(kind, stages, microbatches, virtual_stages, n_layer);
}

}  // namespace kiri::parallel::pp
