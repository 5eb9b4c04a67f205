#include "kiri/optim/adamw.h"

#include <cmath>

#include "kiri/kernels/cpu/ops.h"

namespace kiri::optim {

double lr_at(int64_t step, double lr, int64_t warmup, int64_t total, double min_lr) {
  if (warmup > 0 && step < warmup) return lr * double(step + 1) / double(warmup);
  if (step >= total) return min_lr;
  const double span = double(std::max<int64_t>(1, total - warmup));
  const double progress = double(step - warmup) / span;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(nn::ParameterStore& store, const AdamWConfig& cfg, Allocator& allocator)
    : store_(store), cfg_(cfg) {
  KIRI_CHECK(store.dtype() == DType::kF32, "AdamW keeps fp32 states over fp32 parameters, got ",
             dtype_name(store.dtype()));
  m_ = Tensor::zeros({store.numel()}, DType::kF32, Category::kOptimizerStates, allocator);
  v_ = Tensor::zeros({store.numel()}, DType::kF32, Category::kOptimizerStates, allocator);
}

double AdamW::grad_norm() const {
  return std::sqrt(kernels::sum_of_squares(store_.grads()));
}

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  kernels::AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(cfg_.beta1);
  hp.beta2 = static_cast<float>(cfg_.beta2);
  hp.eps = static_cast<float>(cfg_.eps);
  hp.step = step_;
  hp.grad_scale = static_cast<float>(grad_scale);
  // Consecutive parameters with the same decay setting form one range.
  const auto& params = store_.parameters();
  size_t i = 0;
  while (i < params.size()) {
    size_t j = i;
    int64_t count = 0;
    while (j < params.size() && params[j]->weight_decay == params[i]->weight_decay)
      count += params[j++]->numel();
    hp.weight_decay = params[i]->weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    const int64_t off = params[i]->offset;
    Tensor p = store_.values().flat_range(off, count);
    Tensor g = store_.grads().flat_range(off, count);
    Tensor m = m_.flat_range(off, count);
    Tensor v = v_.flat_range(off, count);
    kernels::adamw_update(p, g, m, v, hp);
    i = j;
  }
}

double AdamW::clip_and_step(double lr) {
  const double norm = grad_norm();
  double scale = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) scale = cfg_.grad_clip / (norm + 1e-6);
  step(lr, scale);
  return norm;
}

}  // namespace kiri::optim
