#pragma once
// The learning rate of each optimizer step (train.lr_schedule): kiri's own schedules
// (a linear warm-up from lr/warmup, then cosine, linear or no decay to train.min_lr) and
// DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR with their exact formulas, so a
// DeepSpeed config's scheduler (docs/deepspeed.md) runs the rates DeepSpeed would.
#include <cstdint>

namespace kiri {

struct TrainConfig;

enum class LrSchedule {
  kCosine,          // kiri's default: warm-up, cosine decay to min_lr
  kLinear,          // warm-up, linear decay to min_lr
  kConstant,        // warm-up, then lr
  kDsWarmup,        // DeepSpeed WarmupLR
  kDsWarmupDecay,   // DeepSpeed WarmupDecayLR
  kDsWarmupCosine,  // DeepSpeed WarmupCosineLR
};
// The warm-up curve of the DeepSpeed schedules (kiri's own warm up linearly).
enum class WarmupType { kLinear, kLog };

// The learning rate of 0-based optimizer step `step`. The DeepSpeed schedules step after
// the optimizer (their step s runs at iteration s - 1: the first step at the warm-up's
// start, WarmupCosineLR's at 0) and warm up over max(2, warmup) iterations, as DeepSpeed does.
double lr_at_step(const TrainConfig& t, int64_t step);

// The step at which the decay ends: train.decay_steps, or train.steps when it is 0.
int64_t decay_end(const TrainConfig& t);

}  // namespace kiri
