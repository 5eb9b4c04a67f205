#include "kiri/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::optim {
namespace {

// Feeds the steps (true = finite gradients) and returns the scale after each,
// checking update()'s answer (skip exactly the non-finite steps).
std::vector<double> run(DynamicLossScaler& s, const std::vector<bool>& steps) {
  std::vector<double> scales;
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(s.update(steps[i]), !steps[i]) << "step " << i;
    scales.push_back(s.scale());
  }
  return scales;
}

LossScalerOptions small(double initial, int64_t interval) {
  LossScalerOptions o;
  o.initial_scale = initial;
  o.growth_interval = interval;
  return o;
}

void expect_config_error(const LossScalerOptions& o, const std::string& names) {
  try {
    DynamicLossScaler s(o);
    ADD_FAILURE() << "accepted options that should name " << names;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(e.message().find(names), std::string::npos) << e.message();
  }
}

TEST(DynamicLossScaler, Defaults) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 0);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().growth_interval, 1000);
  EXPECT_EQ(s.options().min_scale, 1.0);
  EXPECT_TRUE(s.options().dynamic);
}

TEST(DynamicLossScaler, ScriptedSequenceOfScales) {
  DynamicLossScaler s(small(1024, 3));
  const bool T = true, F = false;
  // clean x3 -> grow; skip -> back off and restart the count; two clean then
  // a skip -> no growth; two skips in a row; three clean -> grow.
  const std::vector<bool> steps = {T, T, T, F, T, T, F, F, T, T, T, T};
  const std::vector<double> want = {1024, 1024, 2048, 1024, 1024, 1024,
                                    512,  256,  256,  256,  512,  512};
  EXPECT_EQ(run(s, steps), want);
  EXPECT_EQ(s.skipped_steps(), 3);
  EXPECT_EQ(s.clean_steps(), 1);  // the last step, after the growth
}

TEST(DynamicLossScaler, CleanStepsCountUpToTheIntervalThenRestart) {
  DynamicLossScaler s(small(8, 4));
  std::vector<int64_t> counts;
  for (bool finite : {true, true, true, true, true, false, true}) {
    s.update(finite);
    counts.push_back(s.clean_steps());
  }
  EXPECT_EQ(counts, (std::vector<int64_t>{1, 2, 3, 0, 1, 0, 1}));
  EXPECT_EQ(s.scale(), 8.0);  // 8 -> 16 -> 8
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(DynamicLossScaler, CustomFactors) {
  LossScalerOptions o = small(100, 2);
  o.growth_factor = 3;
  o.backoff_factor = 0.25;
  DynamicLossScaler s(o);
  EXPECT_EQ(run(s, {true, true, false, true, true}), (std::vector<double>{100, 300, 75, 75, 225}));
}

TEST(DynamicLossScaler, BackoffStopsAtMinScale) {
  LossScalerOptions o = small(8, 2);
  o.min_scale = 3;
  DynamicLossScaler s(o);
  // 8 -> 4 -> max(2, 3) = 3 -> stays 3; growth from the floor still works.
  EXPECT_EQ(run(s, {false, false, false, false, true, true}),
            (std::vector<double>{4, 3, 3, 3, 3, 6}));
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(DynamicLossScaler, DefaultMinScaleIsOne) {
  DynamicLossScaler s;  // 2^16: sixteen halvings reach 1
  for (int i = 0; i < 16; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped_steps(), 17);
}

TEST(DynamicLossScaler, GrowthNeverOverflowsToInf) {
  LossScalerOptions o = small(std::numeric_limits<double>::max() / 1.5, 1);
  DynamicLossScaler s(o);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), o.initial_scale);
  EXPECT_TRUE(std::isfinite(s.scale()));
}

TEST(DynamicLossScaler, StaticScaleNeverChanges) {
  LossScalerOptions o = small(128, 2);
  o.dynamic = false;
  DynamicLossScaler s(o);
  EXPECT_EQ(run(s, {true, true, true, false, false, true, true, true}),
            std::vector<double>(8, 128.0));
  EXPECT_EQ(s.skipped_steps(), 2);  // non-finite steps are still skipped
  EXPECT_EQ(s.clean_steps(), 3);
}

TEST(DynamicLossScaler, StaticScaleMayBeBelowMinScale) {
  LossScalerOptions o = small(0.5, 2);
  o.dynamic = false;
  DynamicLossScaler s(o);
  s.update(false);
  EXPECT_EQ(s.scale(), 0.5);
}

TEST(DynamicLossScaler, StateRoundTrip) {
  DynamicLossScaler a(small(1024, 3));
  run(a, {true, true, true, false, true, false, true, true});
  const DynamicLossScaler::State st = a.state();
  EXPECT_EQ(st.scale, 512.0);  // 1024 -> 2048 -> 1024 -> 512
  EXPECT_EQ(st.clean_steps, 2);
  EXPECT_EQ(st.skipped_steps, 2);

  DynamicLossScaler b(small(1024, 3));
  b.set_state(st);
  EXPECT_EQ(b.scale(), 512.0);
  EXPECT_EQ(b.clean_steps(), 2);
  EXPECT_EQ(b.skipped_steps(), 2);
  // Both continue identically: the next clean step is the third in a row.
  const std::vector<bool> rest = {true, false, true, true, true};
  EXPECT_EQ(run(a, rest), run(b, rest));
  EXPECT_EQ(b.scale(), 1024.0);
  EXPECT_EQ(b.state().skipped_steps, 3);
}

TEST(DynamicLossScaler, RejectsBadState) {
  DynamicLossScaler s;
  for (double scale : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    try {
      s.set_state({scale, 0, 0});
      ADD_FAILURE() << "accepted scale " << scale;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint);
    }
  }
  EXPECT_THROW(s.set_state({1.0, -1, 0}), Error);
  EXPECT_THROW(s.set_state({1.0, 0, -1}), Error);
  EXPECT_EQ(s.scale(), 65536.0);  // unchanged by the refused states
}

TEST(DynamicLossScaler, RejectsBadOptionsNamingTheNumbers) {
  LossScalerOptions o;
  o.initial_scale = 0;
  expect_config_error(o, "initial_scale must be positive and finite, got 0");
  o = {};
  o.growth_factor = 1;
  expect_config_error(o, "growth_factor must be > 1, got 1");
  o = {};
  o.backoff_factor = 1;
  expect_config_error(o, "backoff_factor must be in (0, 1), got 1");
  o = {};
  o.backoff_factor = 0;
  expect_config_error(o, "backoff_factor must be in (0, 1), got 0");
  o = {};
  o.growth_interval = 0;
  expect_config_error(o, "growth_interval must be >= 1, got 0");
  o = {};
  o.min_scale = -2;
  expect_config_error(o, "min_scale must be positive and finite, got -2");
  o = {};
  o.initial_scale = 4;
  o.min_scale = 8;
  expect_config_error(o, "min_scale 8 is above initial_scale 4");
}

}  // namespace
}  // namespace kiri::optim
