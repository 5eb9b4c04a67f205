#pragma once
// Pipeline parallelism, part 2: the order in which each stage runs its forward and
// backward passes. A schedule is DATA: one table per rank (pipeline stage index) listing
// its compute actions in order. The executor walks its rank's table, receiving a
// forward's input from rank - 1 (or a backward's output gradient from rank + 1) before
// the action and sending the result after it; simulate.h runs the same tables against
// their data dependencies, which is how the tables are proven free of deadlock and how
// their bubble and memory are measured.
//
// p = stages, m = micro-batches, v = virtual stages (model chunks) per rank.
//
//   gpipe        all m forwards, then all m backwards (in reverse micro order, so the
//                last micro-batch's activations, the freshest, go first). Holds m
//                micro-batches of activations; bubble (p-1)/(m+p-1) of the makespan.
//   1f1b         Megatron's non-interleaved schedule (PipeDream-Flush): rank r runs
//                p-r-1 warm-up forwards, then alternates one forward and one backward,
//                then drains the remaining backwards. Same bubble as GPipe, but rank r
//                holds at most p-r micro-batches (<= p, not m).
//                Its warm-up leaves no slack: with p2p latency c every steady step on
//                rank 0 waits for the round trip's hops, so the cost grows with m,
//                while GPipe and interleaved pay 2(p*v-1)c once (simulate_test.cpp,
//                LatencyCostPerSchedule).
//   interleaved  Megatron's interleaved 1F1B: each rank holds v chunks (rank r has model
//                chunks r, r+p, r+2p, ...), so a micro-batch visits every rank v times
//                and each visit is 1/v as long; the fill/drain shrinks to
//                (p-1)/(v*m+p-1) of the makespan, i.e. (p-1)/(v*m) of the ideal time
//                as in Narayanan et al. 2021, at the price of v times more p2p messages.
//                Micro-batches go in groups of p: a rank runs micro-batches
//                [g*p, (g+1)*p) through chunk 0, then the same group through chunk 1,
//                ...; hence m must be a multiple of p.
#include <string>
#include <vector>

#include "kiri/config/layout.h"

namespace kiri::parallel::pp {

// The schedule is the layout's (kiri::PipelineSchedule, config/layout.h; name() spells it).
// "gpipe", "1f1b", "interleaved"; anything else raises kConfig naming the allowed values.
PipelineSchedule parse_schedule(const std::string& name);

struct Action {
  enum class Op { kForward, kBackward };
  Op op = Op::kForward;
  int micro = 0;  // micro-batch index in [0, m)
  int chunk = 0;  // local chunk (virtual stage) on this rank in [0, v); model chunk
                  // chunk * p + rank. Always 0 unless interleaved.
  bool operator==(const Action&) const = default;
};
std::string action_str(const Action& a);  // "F3.1" (forward, micro 3, chunk 1) or "B0.0"

// tables[rank] = rank's actions in execution order.
using Schedule = std::vector<std::vector<Action>>;

// Builds the tables. Validates (stages, micro-batches, virtual stages) like
// validate_pipeline minus the layer count; raises kConfig.
std::vector<std::vector<Action>> make_schedule(PipelineSchedule kind, int stages, int microbatches,
                                               int virtual_stages);

// Every rule the pipeline configuration must satisfy, each raising kConfig naming the
// rule and the numbers:
//   parallel.pp >= 1, parallel.microbatches >= 1,
//   parallel.pp <= model.n_layer (every stage needs a layer),
//   virtual_stages == 1 for gpipe and 1f1b, >= 2 for interleaved,
//   interleaved: m a multiple of p, and n_layer >= p * v (every chunk needs a layer).
void validate_pipeline(PipelineSchedule kind, int n_layer, int stages, int microbatches,
                       int virtual_stages);

}  // namespace kiri::parallel::pp
