#include "kiri/parallel/pp/simulate.h"

#include <algorithm>
#include <string>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

using Op = Action::Op;
constexpr double kNotDone = -1.0;

// Finish times of every (op, micro, model chunk); kNotDone until it has run.
struct Clock {
  int m, g;
  std::vector<double> t;
  Clock(int micro, int chunks) : m(micro), g(chunks), t(2 * micro * chunks, kNotDone) {}
  double& at(Op op, int micro, int chunk) {
    return t[(op == Op::kForward ? 0 : m * g) + micro * g + chunk];
  }
};

// What an action waits for: the action (op, micro, model chunk) and whether it crosses ranks.
struct Need {
  Op op;
  int micro, chunk;
  bool remote;
};

std::vector<Need> needs_of(const Action& a, int rank, int p, int chunks) {
  const int g = a.chunk * p + rank;
  std::vector<Need> needs;
  if (a.op == Op::kForward) {
    if (g > 0) needs.push_back({Op::kForward, a.micro, g - 1, (g - 1) % p != rank});
  } else {
    needs.push_back({Op::kForward, a.micro, g, false});
    if (g + 1 < chunks) needs.push_back({Op::kBackward, a.micro, g + 1, (g + 1) % p != rank});
  }
  return needs;
}

// Every (op, micro, chunk) exactly once in each rank's table, nothing out of range.
void check_coverage(const std::vector<std::vector<Action>>& tables, int m, int v) {
  for (size_t r = 0; r < tables.size(); ++r) {
    std::vector<int> seen(2 * m * v, 0);
    for (const Action& a : tables[r]) {
      KIRI_CHECK_KIND(kInternal, a.micro >= 0 && a.micro < m && a.chunk >= 0 && a.chunk < v,
                      "pipeline schedule: rank ", r, " has ", action_str(a), " outside ", m,
                      " micro-batches x ", v, " chunks");
      int& n = seen[(a.op == Op::kForward ? 0 : m * v) + a.micro * v + a.chunk];
      KIRI_CHECK_KIND(kInternal, ++n == 1, "pipeline schedule: rank ", r, " runs ", action_str(a),
                      " twice");
    }
    KIRI_CHECK_KIND(kInternal, static_cast<int>(tables[r].size()) == 2 * m * v,
                    "pipeline schedule: rank ", r, " has ", tables[r].size(), " actions, expected ",
                    2 * m * v, " (a forward and a backward of ", m, " micro-batches x ", v,
                    " chunks)");
  }
}

// The message for a table that stopped: each stuck rank, its next action, what it needs.
std::string deadlock_report(const std::vector<std::vector<Action>>& tables,
                            const std::vector<size_t>& next, Clock& clock, int p) {
  std::string msg = "pipeline schedule deadlocks:";
  for (int r = 0; r < p; ++r) {
    if (next[r] == tables[r].size()) continue;
    const Action& a = tables[r][next[r]];
    msg += str(" rank ", r, " at step ", next[r], " (", action_str(a), ") waits for");
    for (const Need& n : needs_of(a, r, p, clock.g))
      if (clock.at(n.op, n.micro, n.chunk) == kNotDone)
        msg += str(" ", action_str({n.op, n.micro, n.chunk / p}), " of rank ", n.chunk % p, ";");
  }
  return msg;
}

}  // namespace

SimResult simulate(const std::vector<std::vector<Action>>& tables, int microbatches,
                   int virtual_stages, const SimCosts& costs) {
  const int p = static_cast<int>(tables.size()), m = microbatches, v = virtual_stages;
  KIRI_CHECK(p >= 1 && m >= 1 && v >= 1, "simulate: ", p, " ranks, ", m, " micro-batches, ", v,
             " chunks");
  check_coverage(tables, m, v);
  Clock clock(m, p * v);
  SimResult res;
  res.busy.assign(p, 0.0);
  res.peak_in_flight.assign(p, 0);
  res.start.resize(p);
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  std::vector<int> held(p, 0);
  // Sweep the ranks, advancing each as far as its dependencies allow; start times depend
  // only on finished actions, so the sweep order does not change the result.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      for (; next[r] < tables[r].size(); ++next[r], progress = true) {
        const Action& a = tables[r][next[r]];
        double ready = free_at[r];
        bool blocked = false;
        for (const Need& n : needs_of(a, r, p, p * v)) {
          const double done = clock.at(n.op, n.micro, n.chunk);
          blocked = blocked || done == kNotDone;
          ready = std::max(ready, done + (n.remote ? costs.p2p : 0.0));
        }
        if (blocked) break;
        const bool fwd = a.op == Op::kForward;
        const double cost = fwd ? costs.forward : costs.backward;
        res.start[r].push_back(ready);
        free_at[r] = ready + cost;
        res.busy[r] += cost;
        clock.at(a.op, a.micro, a.chunk * p + r) = free_at[r];
        held[r] += fwd ? 1 : -1;
        res.peak_in_flight[r] = std::max(res.peak_in_flight[r], held[r]);
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] != tables[r].size()) KIRI_RAISE(kInternal, deadlock_report(tables, next, clock, p));
  res.makespan = *std::max_element(free_at.begin(), free_at.end());
  double busy = 0.0;
  for (double b : res.busy) busy += b;
  res.bubble = res.makespan > 0 ? 1.0 - busy / (p * res.makespan) : 0.0;
  return res;
}

double ideal_bubble(PipelineSchedule kind, int stages, int microbatches, int virtual_stages) {
  const int steps = microbatches * (kind == PipelineSchedule::kInterleaved ? virtual_stages : 1);
  return static_cast<double>(stages - 1) / (steps + stages - 1);
}

}  // namespace kiri::parallel::pp
