#include "kiri/config/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "kiri/config/run_config.h"

namespace kiri {

namespace {

// kiri's schedules: lr x (step + 1) / warmup during warm-up, then the decay from lr at
// step `warmup` to min_lr at step `end`.
double kiri_lr(const TrainConfig& t, int64_t step) {
  const double lr = t.optimizer.lr, min_lr = t.min_lr;
  const int64_t warmup = t.warmup, end = decay_end(t);
  if (warmup > 0 && step < warmup) return lr * double(step + 1) / double(warmup);
  if (t.lr_schedule == LrSchedule::kConstant) return lr;
  if (step >= end) return min_lr;
  const double progress = double(step - warmup) / double(std::max<int64_t>(1, end - warmup));
  if (t.lr_schedule == LrSchedule::kLinear) return lr + (min_lr - lr) * progress;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

// DeepSpeed's lr_schedules.py: iteration `it` (-1 before the first scheduler step).
double deepspeed_lr(const TrainConfig& t, int64_t step) {
  const double lr = t.optimizer.lr, start = t.warmup_lr, min_lr = t.min_lr;
  const int64_t it = step - 1;
  const int64_t warmup = std::max<int64_t>(2, t.warmup);
  const int64_t end = decay_end(t);
  if (it < 0) return t.lr_schedule == LrSchedule::kDsWarmupCosine ? 0.0 : start;
  if (it < warmup) {
    const double gamma = t.warmup_type == WarmupType::kLog
                             ? std::log(double(it + 1)) / std::log(double(warmup))
                             : double(it) / double(warmup);
    return start + (lr - start) * gamma;
  }
  if (t.lr_schedule == LrSchedule::kDsWarmup) return lr;
  const double span = double(std::max<int64_t>(1, end - warmup));
  if (t.lr_schedule == LrSchedule::kDsWarmupDecay)
    return min_lr + (lr - min_lr) * std::max(0.0, double(end - it) / span);
  const double progress = std::min(1.0, double(it - warmup + 1) / span);
  return std::max(0.0, min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace

int64_t decay_end(const TrainConfig& t) {
  return t.decay_steps > 0 ? t.decay_steps : t.steps;
}

double lr_at_step(const TrainConfig& t, int64_t step) {
  switch (t.lr_schedule) {
    case LrSchedule::kCosine:
    case LrSchedule::kLinear:
    case LrSchedule::kConstant:
      return kiri_lr(t, step);
    default:
      return deepspeed_lr(t, step);
  }
}

}  // namespace kiri
