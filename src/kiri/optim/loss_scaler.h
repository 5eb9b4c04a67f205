#pragma once
// Dynamic loss scaling for fp16 training (as PyTorch's GradScaler and
// DeepSpeed's dynamic loss scale): the loss is multiplied by scale() before
// backward so that small gradients survive in f16, and the gradients are
// divided by it before the optimizer step. A step whose gradients hold an inf
// or NaN is skipped and the scale backs off; after growth_interval clean steps
// in a row the scale grows again.
#include <cstdint>

namespace kiri::optim {

struct LossScalerOptions {
  double initial_scale = 65536;    // 2^16
  double growth_factor = 2;        // > 1
  double backoff_factor = 0.5;     // in (0, 1)
  int64_t growth_interval = 1000;  // consecutive clean steps before growing (>= 1)
  double min_scale = 1;            // backoff never goes below it (> 0, <= initial_scale)
  bool dynamic = true;             // false: a static scale that never changes
};

class DynamicLossScaler {
 public:
  using Options = LossScalerOptions;
  // Raises kConfig naming the offending number.
  explicit DynamicLossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  // Once per optimizer step, with whether every gradient was finite. Returns
  // true when the step must be skipped (non-finite gradients): the scale then
  // backs off (not below min_scale) and the clean-step count restarts. A
  // finite step counts; the growth_interval-th in a row grows the scale and
  // restarts the count (a growth that would overflow to inf keeps the scale).
  // Static mode still skips and counts, but never changes the scale.
  bool update(bool grads_finite);

  int64_t skipped_steps() const { return skipped_; }  // in total
  int64_t clean_steps() const { return clean_; }      // since the last growth or skip

  // For checkpoints.
  struct State {
    double scale;
    int64_t clean_steps;
    int64_t skipped_steps;
  };
  State state() const { return {scale_, clean_, skipped_}; }
  // Raises kCheckpoint on a state these options could not produce (scale not
  // positive and finite, negative counts).
  void set_state(const State& s);

  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace kiri::optim
