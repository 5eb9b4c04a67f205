#pragma once
// One training step of a ParallelGPT: the step that `kiri train` takes and that every
// benchmark times. Zero the gradients (unless the last update did); forward and backward over each
// accumulation batch (the layout reduces the gradients after the last); clip and update (AdamW),
// deferred into the next forward when the optimizer is offloaded; the layout's work after the
// update. Data, metrics and clocks stay with the caller: it fills the batches and reads
// the outcome.
#include <cstdint>
#include <functional>

#include "kiri/base/trace.h"
#include "kiri/model/parallelize.h"
#include "kiri/nn/module.h"
#include "kiri/optim/adamw.h"
#include "kiri/optim/loss_scaler.h"

namespace kiri::train {

struct StepSettings {
  double lr = 0;  // this step's learning rate
  // Each token's weight in the loss: 1 / the tokens of the global batch (every
  // accumulation batch on every dp rank), so the gradient is the batch mean's.
  double loss_weight = 0;
  int64_t accumulation = 1;  // batches accumulated into the step (train.grad_accum)
  double loss_factor = 1;    // a test's fault on this rank's loss (faults.h: inf, NaN), else 1
};

struct StepOutcome {
  double loss_sum = 0;    // this rank's sum of token losses (the last pipeline stage's)
  double loss_scale = 1;  // the loss's scale in this step (fp16 with a scaler), else 1
  double grad_norm = 0;   // global, before clipping
  bool skipped = false;   // a non-finite norm: no update on any rank
  double backward_s = 0;  // StepOptions::time_backward: backward + reduction, summed
  // The optimizer's passes over the parameters in this step: the zeroing of the
  // gradients (when it runs apart), the norm, clipping and update (its beginning only
  // when deferred), and the layout's work after it.
  double optimizer_s = 0;
};

struct StepOptions {
  Tracer* tracer = nullptr;                    // for the optimizer's span
  optim::DynamicLossScaler* scaler = nullptr;  // fp16: scales the loss, skips overflows
  // The DDP benchmark's split: each batch's backward and gradient reduction timed apart
  // from its forward. One pipeline stage and one micro-batch only (kConfig otherwise).
  bool time_backward = false;
  // The next step's zeroing of the gradients fused into the update (AdamW::set_zero_grads)
  // where the update reads every gradient zero_grad would zero (no sharding, no deferred
  // update); off, a pass of its own at the start of each step (bitwise the same result).
  bool fuse_zero_grad = true;
};

class TrainingStep {
 public:
  TrainingStep(model::ParallelGPT& model, optim::AdamW& optimizer, StepOptions options = {});

  // One optimizer step over settings.accumulation batches of (inputs, targets) [rows, T]
  // I32. Before batch i (0-based), fill_batch(i) refills them; unset, every batch is the
  // one given.
  StepOutcome run(nn::Context& ctx, const Tensor& inputs, const Tensor& targets,
                  const StepSettings& settings,
                  const std::function<void(int64_t)>& fill_batch = {});

 private:
  // One batch's forward and backward; the sum of its token losses.
  double forward_backward(nn::Context& ctx, const Tensor& inputs, const Tensor& targets,
                          double weight, bool last, StepOutcome& out);
  // Clip, update (or begin the deferred update), and the layout's work after it.
  void update(double lr, StepOutcome& out);

  model::ParallelGPT& model_;
  optim::AdamW& optimizer_;
  StepOptions options_;
};

}  // namespace kiri::train
