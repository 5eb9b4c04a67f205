#include "kiri/train/step.h"

#include <cmath>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"

namespace kiri::train {

TrainingStep::TrainingStep(model::ParallelGPT& model, optim::AdamW& optimizer, StepOptions options)
    : model_(model), optimizer_(optimizer), options_(options) {
  KIRI_CHECK_KIND(kConfig,
                  !options_.time_backward ||
                      (!model_.pipeline() && model_.options().pipeline.microbatches == 1),
                  "a step that times its backward needs one pipeline stage and one micro-batch "
                  "(microbatches = ",
                  model_.options().pipeline.microbatches, ")");
  // Offloaded, the deferred update zeroes each unit's gradients itself.
  optimizer_.set_zero_grads(options_.fuse_zero_grad && model_.segments_cover_zero_grad() &&
                            !optimizer_.offloaded());
}

StepOutcome TrainingStep::run(nn::Context& ctx, const Tensor& inputs, const Tensor& targets,
                              const StepSettings& settings,
                              const std::function<void(int64_t)>& fill_batch) {
  StepOutcome out;
  // A deferred update (offload) zeroes each unit's gradients once it has updated it; an
  // update with set_zero_grads zeroed them all.
  Timer zeroing;
  if (!optimizer_.take_zeroed_grads() && !model_.update_pending()) model_.zero_grad();
  out.optimizer_s += zeroing.seconds();
  // fp16: the loss (so every gradient) is multiplied by the loss scale; the optimizer
  // divides it out.
  out.loss_scale = options_.scaler ? options_.scaler->scale() : 1.0;
  const double weight = settings.loss_weight * out.loss_scale * settings.loss_factor;
  for (int64_t i = 0; i < settings.accumulation; ++i) {
    if (fill_batch) fill_batch(i);
    out.loss_sum +=
        forward_backward(ctx, inputs, targets, weight, i + 1 == settings.accumulation, out);
  }
  // The last step's deferred update is done (every unit ran forward); its last writes had
  // the whole backward to land.
  model_.finish_update();
  update(settings.lr, out);
  return out;
}

double TrainingStep::forward_backward(nn::Context& ctx, const Tensor& inputs, const Tensor& targets,
                                      double weight, bool last, StepOutcome& out) {
  if (!options_.time_backward) return model_.forward_backward(ctx, inputs, targets, weight, last);
  model_.begin_micro_batch(last);
  const double loss = model_.model().forward(ctx, inputs, targets, weight);
  Timer timer;
  model_.model().backward(ctx);
  model_.end_micro_batch();
  out.backward_s += timer.seconds();
  return loss;
}

void TrainingStep::update(double lr, StepOutcome& out) {
  // Offloaded, the update overlaps the next forward: it begins here and each unit is
  // updated when the next forward first needs it (ParallelGPT::defer_update).
  const bool defer = optimizer_.offloaded();
  Timer timer;
  {
    Tracer::Span span(options_.tracer, "optimizer", "compute");
    out.grad_norm = defer ? optimizer_.clip_and_begin_step(lr, out.loss_scale)
                          : optimizer_.clip_and_step(lr, out.loss_scale);
  }
  // A non-finite gradient (an fp16 overflow) skips the update on every rank alike: the
  // norm is summed over the shard group (stage 0: the gradients are already identical
  // everywhere).
  out.skipped = !std::isfinite(out.grad_norm);
  if (options_.scaler) options_.scaler->update(!out.skipped);
  if (!out.skipped && defer) {
    optim::AdamW* o = &optimizer_;
    model_.defer_update([o](int64_t end) { o->update_through(end); }, [o] { o->finish_step(); });
  } else if (!out.skipped) {
    model_.after_optimizer_step();
  }
  out.optimizer_s += timer.seconds();
}

}  // namespace kiri::train
