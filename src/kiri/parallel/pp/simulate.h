#pragma once
// Pipeline parallelism, part 3: an event simulator for schedule tables. No communication
// happens here; it executes the per-rank tables of schedule.h against the data
// dependencies the real executor has, so that a table is proven to make progress (and
// its bubble and activation memory measured) before any rank runs it.
//
// Model chunk g (0 .. p*v-1, model order) is local chunk g / p of rank g % p. Then
//   forward  (micro, g) needs forward (micro, g-1) finished, plus the p2p latency when
//            g-1 lives on another rank (g = 0 reads the data, no dependency);
//   backward (micro, g) needs its own forward and backward (micro, g+1) finished, plus
//            the latency across ranks (the last chunk starts from its own loss).
// Each rank runs its table in order, one action at a time, each as early as its
// dependencies and the rank allow. Sends are assumed not to block the sender (the
// executor posts isend/irecv, as Megatron batches its p2p ops), so the only way to
// hang is a rank waiting for an action that another rank's order puts after a wait of
// its own: that is reported as a deadlock (kInternal), naming every stuck rank, its
// action and what it waits for.
#include <vector>

#include "kiri/parallel/pp/schedule.h"

namespace kiri::parallel::pp {

// Time units per action on one chunk, and per hop between ranks.
struct SimCosts {
  double forward = 1.0;
  double backward = 2.0;
  double p2p = 0.0;
};

struct SimResult {
  double makespan = 0.0;                   // the last action's end
  std::vector<double> busy;                // per rank: time spent computing
  double bubble = 0.0;                     // idle share: 1 - sum(busy) / (ranks * makespan)
  std::vector<int> peak_in_flight;         // per rank: most (micro, chunk) pairs whose
                                           // forward is done and backward is not, i.e.
                                           // micro-batches of activations held at once
                                           // (each 1/v of a stage when interleaved)
  std::vector<std::vector<double>> start;  // per rank: start time of each table entry
};

// Checks that every rank's table runs each forward and backward of (micro in [0, m),
// chunk in [0, v)) exactly once (else kInternal naming the rank and action), then runs it.
SimResult simulate(const std::vector<std::vector<Action>>& tables, int microbatches,
                   int virtual_stages, const SimCosts& costs);

// The bubble (idle share of the makespan) the schedule is built to reach when every chunk
// costs the same forward and backward time and p2p is free:
//   gpipe, 1f1b   (p-1) / (m + p - 1)
//   interleaved   (p-1) / (v*m + p - 1)
// Narayanan et al. 2021 quote the interleaved bubble relative to the IDEAL time instead,
// (p-1) / (v*m); both describe the same (p-1) chunk-steps of fill and drain.
double ideal_bubble(PipelineSchedule kind, int stages, int microbatches, int virtual_stages);

}  // namespace kiri::parallel::pp
