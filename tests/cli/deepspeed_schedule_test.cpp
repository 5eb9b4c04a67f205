// train.lr_schedule (train/lr_schedule.h): the learning rate of each step against numbers
// worked out by hand from DeepSpeed's lr_schedules.py (iteration = step - 1, since its
// scheduler steps after the optimizer; warm-up over max(2, warmup_num_steps)) and from
// kiri's own schedules.
#include <gtest/gtest.h>

#include <cmath>

#include "kiri/config/lr_schedule.h"
#include "kiri/config/run_config.h"
#include "kiri/optim/adamw.h"

namespace {

using kiri::lr_at_step;
using kiri::LrSchedule;
using kiri::TrainConfig;
using kiri::WarmupType;

TrainConfig schedule(LrSchedule s, double lr, double warmup_lr, double min_lr, int64_t warmup,
                     int64_t end, WarmupType type = WarmupType::kLinear) {
  TrainConfig t;
  t.lr_schedule = s;
  t.optimizer.lr = lr;
  t.warmup_lr = warmup_lr;
  t.min_lr = min_lr;
  t.warmup = warmup;
  t.steps = end;
  t.warmup_type = type;
  return t;
}

TEST(LrSchedule, DeepSpeedWarmupLRLinear) {
  // WarmupLR(min 1e-4, max 1e-3, 4 steps, linear): min + 9e-4 x it / 4, then 1e-3.
  const TrainConfig t = schedule(LrSchedule::kDsWarmup, 1e-3, 1e-4, 0, 4, 100);
  const double want[] = {1e-4, 1e-4, 3.25e-4, 5.5e-4, 7.75e-4, 1e-3, 1e-3};
  for (int s = 0; s < 7; ++s) EXPECT_NEAR(lr_at_step(t, s), want[s], 1e-15) << "step " << s;
  EXPECT_DOUBLE_EQ(lr_at_step(t, 1000), 1e-3);
}

TEST(LrSchedule, DeepSpeedWarmupLRLog) {
  // gamma = ln(it + 1) / ln(4): it 1 -> 0.5, it 2 -> ln 3 / ln 4 = 0.7924812503605781.
  const TrainConfig t = schedule(LrSchedule::kDsWarmup, 1e-3, 1e-4, 0, 4, 100, WarmupType::kLog);
  EXPECT_NEAR(lr_at_step(t, 0), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 1), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 2), 5.5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 3), 8.132331253245204e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 4), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 5), 1e-3, 1e-15);
}

TEST(LrSchedule, DeepSpeedWarmupLROneWarmupStepIsTwo) {
  // warmup_num_steps = max(2, 1): it 0 -> 0, it 1 -> 0.5 of the way.
  const TrainConfig t = schedule(LrSchedule::kDsWarmup, 1e-3, 0, 0, 1, 100);
  EXPECT_NEAR(lr_at_step(t, 2), 5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 3), 1e-3, 1e-15);
}

TEST(LrSchedule, DeepSpeedWarmupDecayLR) {
  // WarmupDecayLR(total 10, min 0, max 1e-3, 2 steps, linear): after warm-up
  // max(0, (10 - it) / (10 - 2)) of the peak.
  const TrainConfig t = schedule(LrSchedule::kDsWarmupDecay, 1e-3, 0, 0, 2, 10);
  EXPECT_NEAR(lr_at_step(t, 0), 0, 1e-18);
  EXPECT_NEAR(lr_at_step(t, 1), 0, 1e-18);
  EXPECT_NEAR(lr_at_step(t, 2), 5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 3), 1e-3, 1e-15);      // it 2: 8 / 8
  EXPECT_NEAR(lr_at_step(t, 7), 5e-4, 1e-15);      // it 6: 4 / 8
  EXPECT_NEAR(lr_at_step(t, 10), 1.25e-4, 1e-15);  // it 9: 1 / 8
  EXPECT_NEAR(lr_at_step(t, 11), 0, 1e-18);
  EXPECT_NEAR(lr_at_step(t, 50), 0, 1e-18);
  // decay_steps (total_num_steps) apart from train.steps.
  TrainConfig d = t;
  d.steps = 5;
  d.decay_steps = 10;
  EXPECT_NEAR(lr_at_step(d, 7), 5e-4, 1e-15);
}

TEST(LrSchedule, DeepSpeedWarmupCosineLR) {
  // WarmupCosineLR(total 10, warmup_min_ratio 0, 2 steps, cos_min_ratio 1e-4, linear) of
  // lr 1e-3: kiri's warmup_lr 0, min_lr 1e-7. After warm-up, progress (it - 2 + 1) / 8.
  const TrainConfig t = schedule(LrSchedule::kDsWarmupCosine, 1e-3, 0, 1e-7, 2, 10);
  EXPECT_EQ(lr_at_step(t, 0), 0);  // before the scheduler's first step: 0, not the min ratio
  EXPECT_NEAR(lr_at_step(t, 1), 0, 1e-18);
  EXPECT_NEAR(lr_at_step(t, 2), 5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 3), 9.619435722790177e-4, 1e-15);  // cos(pi / 8)
  EXPECT_NEAR(lr_at_step(t, 6), 5.0005e-4, 1e-15);             // cos(pi / 2)
  EXPECT_NEAR(lr_at_step(t, 10), 1e-7, 1e-18);
  EXPECT_NEAR(lr_at_step(t, 30), 1e-7, 1e-18);  // clamped at the end
  // warmup_min_ratio 0.1: the warm-up starts at 1e-4 (from iteration 0).
  const TrainConfig r = schedule(LrSchedule::kDsWarmupCosine, 1e-3, 1e-4, 1e-7, 2, 10);
  EXPECT_EQ(lr_at_step(r, 0), 0);
  EXPECT_NEAR(lr_at_step(r, 1), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(r, 2), 5.5e-4, 1e-15);
}

TEST(LrSchedule, KirisCosineIsTheOneOfBefore) {
  const TrainConfig t = schedule(LrSchedule::kCosine, 3e-3, 0, 3e-4, 2, 10);
  for (int s = 0; s < 14; ++s)
    EXPECT_DOUBLE_EQ(lr_at_step(t, s), kiri::optim::lr_at(s, 3e-3, 2, 10, 3e-4)) << s;
  EXPECT_NEAR(lr_at_step(schedule(LrSchedule::kCosine, 1e-3, 0, 1e-4, 2, 10), 6), 5.5e-4, 1e-15);
}

TEST(LrSchedule, KirisLinearAndConstant) {
  // Warm-up lr x (step + 1) / 2, then 1e-3 -> 1e-4 over steps 2..10.
  const TrainConfig t = schedule(LrSchedule::kLinear, 1e-3, 0, 1e-4, 2, 10);
  EXPECT_NEAR(lr_at_step(t, 0), 5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 1), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 2), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 6), 5.5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 9), 2.125e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 10), 1e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(t, 99), 1e-4, 1e-15);
  const TrainConfig c = schedule(LrSchedule::kConstant, 1e-3, 0, 1e-4, 2, 10);
  EXPECT_NEAR(lr_at_step(c, 0), 5e-4, 1e-15);
  EXPECT_NEAR(lr_at_step(c, 5), 1e-3, 1e-15);
  EXPECT_NEAR(lr_at_step(c, 99), 1e-3, 1e-15);
}

TEST(LrSchedule, ScalingKeepsTheWarmupStartsRatio) {
  TrainConfig t = schedule(LrSchedule::kDsWarmupCosine, 1e-3, 1e-4, 1e-7, 2, 10);
  t.lr_scaling = kiri::LrScaling::kLinear;
  t.base_batch = 8;
  kiri::scale_learning_rate(t, 32);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 4e-3);
  EXPECT_DOUBLE_EQ(t.warmup_lr, 4e-4);
  EXPECT_DOUBLE_EQ(t.min_lr, 4e-7);
}

}  // namespace
