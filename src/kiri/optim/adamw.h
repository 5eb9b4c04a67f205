#pragma once
// AdamW with fp32 states (m, v: 8 bytes per parameter, category
// optimizer_states), decoupled weight decay applied only to the parameters
// that ask for it (matrices and embeddings, not biases or LayerNorm), and
// global gradient-norm clipping. Works over a ParameterStore's flat buffers.
#include <cstdint>
#include <vector>

#include "kiri/nn/parameter_store.h"

namespace kiri::optim {

struct AdamWConfig {
  double lr = 6e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables clipping
};

// Linear warm-up from lr/warmup to lr over `warmup` steps, then cosine decay
// to min_lr at step `total` (steps are 0-based; the first step uses lr/warmup).
double lr_at(int64_t step, double lr, int64_t warmup, int64_t total, double min_lr);

class AdamW {
 public:
  AdamW(nn::ParameterStore& store, const AdamWConfig& cfg, Allocator& allocator);

  // Global L2 norm of the gradients (before clipping).
  double grad_norm() const;
  // One update at learning rate lr with gradients multiplied by grad_scale
  // (the clipping factor). Returns nothing; step_count() advances.
  void step(double lr, double grad_scale);
  // Clips to cfg.grad_clip and steps; returns the norm before clipping.
  double clip_and_step(double lr);

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  nn::ParameterStore& store_;
  AdamWConfig cfg_;
  Tensor m_, v_;  // [numel] F32
  int64_t step_ = 0;
};

}  // namespace kiri::optim
