#include "kiri/optim/adamw.h"

#include <algorithm>
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

std::vector<Segment> whole_parameters(nn::ParameterStore& store) {
  std::vector<Segment> out;
  for (nn::Parameter* p : store.parameters()) {
    const int64_t n = p->numel();
    out.push_back({p, 0, p->offset, store.values().flat_range(p->offset, n),
                   store.grads().flat_range(p->offset, n)});
  }
  return out;
}

AdamW::AdamW(int64_t state_numel, std::vector<Segment> segments, const AdamWConfig& cfg,
             Allocator& allocator, std::vector<comm::Communicator*> norm_groups)
    : segments_(std::move(segments)),
      cfg_(cfg),
      norm_groups_(std::move(norm_groups)),
      allocator_(allocator) {
  bool lowp = false;
  for (const Segment& s : segments_) {
    const DType d = s.value.dtype();
    KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16,
               "AdamW updates F32, BF16 or F16 values, got ", dtype_name(d), " for ",
               s.param->name);
    KIRI_CHECK(s.grad.dtype() == d && s.grad.numel() == s.value.numel(), "the gradient of ",
               s.param->name, " must match its values' dtype and size");
    KIRI_CHECK(s.state_offset >= 0 && s.state_offset + s.numel() <= state_numel, "segment of ",
               s.param->name, " at ", s.state_offset, " + ", s.numel(),
               " lies outside the state of ", state_numel, " elements");
    KIRI_CHECK(s.begin >= 0 && s.begin + s.numel() <= s.param->numel(), "segment of ",
               s.param->name, " exceeds the parameter");
    lowp = lowp || d != DType::kF32;
  }
  if (lowp)
    master_ = Tensor::zeros({state_numel}, DType::kF32, Category::kOptimizerStates, allocator);
  m_ = Tensor::zeros({state_numel}, DType::kF32, Category::kOptimizerStates, allocator);
  v_ = Tensor::zeros({state_numel}, DType::kF32, Category::kOptimizerStates, allocator);
}

AdamW::AdamW(nn::ParameterStore& store, const AdamWConfig& cfg, Allocator& allocator)
    : AdamW(store.numel(), whole_parameters(store), cfg, allocator) {}

Tensor AdamW::weights(size_t i) {
  const Segment& s = segments_[i];
  if (s.value.dtype() == DType::kF32) return s.value;
  return master_.flat_range(s.state_offset, s.numel());
}

void AdamW::initialize(uint64_t seed) {
  for (size_t i = 0; i < segments_.size(); ++i) {
    // Each element is drawn at its index in the whole parameter, so a
    // tensor-parallel part gets the numbers the whole would have there.
    const Segment& s = segments_[i];
    Tensor w = weights(i);
    w.zero_();  // padding rows of a vocab-parallel table stay 0
    for (const nn::ElementRun& r : nn::element_runs(*s.param)) {
      const int64_t lo = std::max(r.local, s.begin),
                    hi = std::min(r.local + r.length, s.begin + s.numel());
      if (lo >= hi) continue;
      Tensor part = w.flat_range(lo - s.begin, hi - lo);
      nn::init_values(part, s.param->init, seed, s.param->name, r.global + (lo - r.local));
    }
  }
  write_back();
}

void AdamW::write_back() {
  for (size_t i = 0; i < segments_.size(); ++i)
    if (segments_[i].value.dtype() != DType::kF32) kernels::convert(segments_[i].value, weights(i));
}

double AdamW::grad_norm(double grad_divisor) const {
  Tensor sum = Tensor::zeros({1}, DType::kF64, Category::kBuffers, allocator_);
  for (const Segment& s : segments_)
    if (s.counted_in_norm) sum.data<double>()[0] += kernels::sum_of_squares(s.grad);
  for (comm::Communicator* g : norm_groups_)
    if (g && g->size() > 1) g->all_reduce(sum, comm::ReduceOp::kSum);
  return std::sqrt(sum.data<double>()[0]) / grad_divisor;
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
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment& s = segments_[i];
    hp.weight_decay = s.param->weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
    Tensor p = weights(i);
    Tensor m = m_.flat_range(s.state_offset, s.numel());
    Tensor v = v_.flat_range(s.state_offset, s.numel());
    kernels::adamw_update(p, s.grad, m, v, hp, s.value.dtype() == DType::kF32 ? nullptr : &s.value);
  }
}

double AdamW::clip_and_step(double lr, double loss_scale) {
  const double norm = grad_norm(loss_scale);
  if (!std::isfinite(norm)) return norm;
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / (norm + 1e-6);
  step(lr, clip / loss_scale);
  return norm;
}

}  // namespace kiri::optim
