#pragma once
// The optimizer's settings (train.lr, train.beta1, ...): AdamW with decoupled weight decay
// and global gradient-norm clipping (optim/adamw.h runs it).

namespace kiri {

struct AdamWConfig {
  double lr = 6e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // max global L2 norm; 0 disables clipping
};

}  // namespace kiri
