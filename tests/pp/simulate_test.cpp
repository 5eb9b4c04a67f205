#include "kiri/parallel/pp/simulate.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

using Op = Action::Op;

struct Case {
  PipelineSchedule kind;
  int p, m, v;
};

// Every kind for p in {1, 2, 4}, m in {1, 2, 4, 8}; interleaved with v = 2 where m % p == 0
// and p >= 2 (the layout's rules, kiri::validate_layout).
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int p : {1, 2, 4})
    for (int m : {1, 2, 4, 8}) {
      cases.push_back({PipelineSchedule::kGpipe, p, m, 1});
      cases.push_back({PipelineSchedule::k1F1B, p, m, 1});
      if (m % p == 0 && p >= 2) cases.push_back({PipelineSchedule::kInterleaved, p, m, 2});
    }
  return cases;
}

std::string name(const Case& c) {
  return str(name(c.kind), " p ", c.p, " m ", c.m, " v ", c.v);
}

TEST(PpSimulate, EveryActionOnceAndNoDeadlock) {
  for (const Case& c : all_cases()) {
    const auto tables = make_schedule(c.kind, c.p, c.m, c.v);
    ASSERT_EQ(static_cast<int>(tables.size()), c.p) << name(c);
    for (const auto& t : tables) {
      std::set<std::tuple<Op, int, int>> seen;
      for (const Action& a : t) EXPECT_TRUE(seen.insert({a.op, a.micro, a.chunk}).second);
      EXPECT_EQ(static_cast<int>(seen.size()), 2 * c.m * c.v) << name(c);
    }
    for (double p2p : {0.0, 0.5}) EXPECT_NO_THROW(simulate(tables, c.m, c.v, {1, 2, p2p}));
  }
}

// Forward 1, backward 2, free p2p: the idle share of the makespan is exactly
// (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(v*m+p-1) for interleaved; the latter is
// (p-1)/(v*m) of the ideal time v*m*(f+b), as Narayanan et al. 2021 state it.
TEST(PpSimulate, BubbleMatchesTheFormulas) {
  for (const Case& c : all_cases()) {
    const SimResult r = simulate(make_schedule(c.kind, c.p, c.m, c.v), c.m, c.v, {1, 2, 0});
    const double steps = (c.kind == PipelineSchedule::kInterleaved ? c.v : 1) * c.m;
    EXPECT_NEAR(r.bubble, (c.p - 1) / (steps + c.p - 1), 1e-12) << name(c);
    EXPECT_NEAR(r.bubble, ideal_bubble(c.kind, c.p, c.m, c.v), 1e-12) << name(c);
    EXPECT_NEAR(r.makespan, (steps + c.p - 1) * 3.0, 1e-12) << name(c);
    const double ideal = c.m * c.v * 3.0;
    EXPECT_NEAR((r.makespan - ideal) / ideal, (c.p - 1) / steps, 1e-12) << name(c);
    for (double b : r.busy) EXPECT_DOUBLE_EQ(b, ideal) << name(c);
  }
}

TEST(PpSimulate, OneFOneBHoldsAtMostPMicroBatchesGPipeHoldsM) {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      const SimCosts costs{1, 2, 0};
      const SimResult one = simulate(make_schedule(PipelineSchedule::k1F1B, p, m, 1), m, 1, costs);
      const SimResult all = simulate(make_schedule(PipelineSchedule::kGpipe, p, m, 1), m, 1, costs);
      EXPECT_EQ(one.peak_in_flight[0], std::min(p, m));
      EXPECT_EQ(one.peak_in_flight[p - 1], 1);
      EXPECT_EQ(all.peak_in_flight[0], m);
      EXPECT_NEAR(one.makespan, all.makespan, 1e-12);  // same bubble, less memory
    }
}

// Interleaving with v = 2 on p = 4, m = 8 shrinks the bubble; the extra hops cost when
// p2p is not free (v times the messages).
TEST(PpSimulate, InterleavingShrinksTheBubble) {
  const SimResult flat = simulate(make_schedule(PipelineSchedule::k1F1B, 4, 8, 1), 8, 1, {2, 4, 0});
  const SimResult inter =
      simulate(make_schedule(PipelineSchedule::kInterleaved, 4, 8, 2), 8, 2, {1, 2, 0});
  EXPECT_NEAR(flat.bubble, 3.0 / 11, 1e-12);
  EXPECT_NEAR(inter.bubble, 3.0 / 19, 1e-12);
  EXPECT_LT(inter.makespan, flat.makespan);
}

// p2p latency c (not overlapped with compute). GPipe and interleaved pay it only while
// filling and draining: 2 hops per model-chunk boundary, (m+p-1)(f+b) + 2(p-1)c and
// (v*m+p-1)(f+b) + 2(p*v-1)c. 1F1B's warm-up leaves no slack, so in the steady phase
// rank 0 waits for every backward's round trip and the cost grows with m.
TEST(PpSimulate, LatencyCostPerSchedule) {
  const SimCosts costs{1, 2, 0.25};
  for (int m : {4, 8, 16}) {
    const auto gp = simulate(make_schedule(PipelineSchedule::kGpipe, 4, m, 1), m, 1, costs);
    EXPECT_NEAR(gp.makespan, (m + 3) * 3.0 + 2 * 3 * 0.25, 1e-12) << m;
    const auto in = simulate(make_schedule(PipelineSchedule::kInterleaved, 4, m, 2), m, 2, costs);
    EXPECT_NEAR(in.makespan, (2 * m + 3) * 3.0 + 2 * 7 * 0.25, 1e-12) << m;
    const auto fb = simulate(make_schedule(PipelineSchedule::k1F1B, 4, m, 1), m, 1, costs);
    EXPECT_GT(fb.makespan, gp.makespan) << m;
  }
  const auto fb8 = simulate(make_schedule(PipelineSchedule::k1F1B, 4, 8, 1), 8, 1, costs);
  const auto fb16 = simulate(make_schedule(PipelineSchedule::k1F1B, 4, 16, 1), 16, 1, costs);
  EXPECT_NEAR(fb16.makespan - fb8.makespan, 8 * 3.0 + 8 * 1.5 * 0.25, 1e-12);
}

// Interleaving's memory: rank 0 holds (p-1)*2 + (v-1)*p + 1 chunk-micro-batches at the peak
// (each 1/v of a stage), capped by the m*v it runs in all.
TEST(PpSimulate, InterleavedPeakInFlight) {
  for (int p : {2, 4})
    for (int m : {p, 2 * p, 4 * p}) {
      const SimResult r =
          simulate(make_schedule(PipelineSchedule::kInterleaved, p, m, 2), m, 2, {1, 2, 0});
      EXPECT_EQ(r.peak_in_flight[0], std::min(2 * (p - 1) + p + 1, 2 * m)) << p << " " << m;
    }
}

void expect_internal_error(const std::vector<std::vector<Action>>& t, int m, int v,
                           const std::string& needle) {
  try {
    simulate(t, m, v, {});
    FAIL() << "simulated; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PpSimulate, DeadlockNamesRankAndAction) {
  const Action f0{Op::kForward, 0, 0}, f1{Op::kForward, 1, 0};
  const Action b0{Op::kBackward, 0, 0}, b1{Op::kBackward, 1, 0};
  // Rank 0 wants micro 0's backward before sending micro 1's forward; rank 1 wants micro
  // 1's forward before running micro 0's backward.
  expect_internal_error({{f0, b0, f1, b1}, {f0, f1, b0, b1}}, 2, 1,
                        "pipeline schedule deadlocks: rank 0 at step 1 (B0.0) waits for B0.0 "
                        "of rank 1; rank 1 at step 1 (F1.0) waits for F1.0 of rank 0;");
  expect_internal_error({{f0, f0, b0, b0}}, 1, 1, "rank 0 runs F0.0 twice");
  expect_internal_error({{f0, b0}}, 2, 1, "rank 0 has 2 actions, expected 4");
  expect_internal_error({{f0, Action{Op::kBackward, 0, 1}}}, 1, 1, "rank 0 has B0.1 outside");
}

}  // namespace
}  // namespace kiri::parallel::pp
