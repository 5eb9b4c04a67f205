#include "kiri/optim/adamw.h"

#include <algorithm>
#include <cmath>

#include "kiri/kernels/ops.h"

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

namespace {
bool any_lowp(const std::vector<Segment>& segments) {
  for (const Segment& s : segments)
    if (s.grad_dtype() != DType::kF32) return true;
  return false;
}
}  // namespace

AdamW::AdamW(int64_t state_numel, std::vector<Segment> segments, const AdamWConfig& cfg,
             Allocator& allocator, std::vector<comm::Communicator*> norm_groups,
             const StateOffload& offload)
    : segments_(std::move(segments)),
      cfg_(cfg),
      norm_groups_(std::move(norm_groups)),
      allocator_(allocator),
      states_(state_numel, any_lowp(segments_), offload, allocator) {
  for (const Segment& s : segments_) {
    // The gradient's dtype is the values' (which, offloaded, are not in memory).
    const DType d = s.grad_dtype();
    KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16,
               "AdamW updates F32, BF16 or F16 values, got ", dtype_name(d), " for ",
               s.param->name);
    KIRI_CHECK(offloaded_values() || (s.value.dtype() == d && s.numel() == s.value.numel()),
               "the gradient of ", s.param->name, " must match its values' dtype and size");
    KIRI_CHECK(s.grad_offloaded() == offloaded_grads() && (!s.grad_offloaded() || s.grad_sq),
               "the gradient of ", s.param->name, " is ", s.grad_offloaded() ? "" : "not ",
               "offloaded, the optimizer's gradients are ", offloaded_grads() ? "" : "not ",
               "(and an offloaded one needs its sum of squares)");
    KIRI_CHECK(s.state_offset >= 0 && s.state_offset + s.numel() <= state_numel, "segment of ",
               s.param->name, " at ", s.state_offset, " + ", s.numel(),
               " lies outside the state of ", state_numel, " elements");
    KIRI_CHECK(s.begin >= 0 && s.begin + s.numel() <= s.param->numel(), "segment of ",
               s.param->name, " exceeds the parameter");
  }
  for (size_t i = 0; i < segments_.size(); ++i) by_state_.push_back(i);
  std::stable_sort(by_state_.begin(), by_state_.end(), [&](size_t a, size_t b) {
    return segments_[a].state_offset < segments_[b].state_offset;
  });
}

AdamW::AdamW(nn::ParameterStore& store, const AdamWConfig& cfg, Allocator& allocator)
    : AdamW(store.numel(), whole_parameters(store), cfg, allocator) {}

template <typename Fn>
void AdamW::for_pieces(const StateStore::Chunk& chunk, Fn&& fn) {
  // Segments in state order; those overlapping [chunk.begin, chunk.end).
  auto it = std::lower_bound(
      by_state_.begin(), by_state_.end(), chunk.begin,
      [&](size_t i, int64_t x) { return segments_[i].state_offset + segments_[i].numel() <= x; });
  for (; it != by_state_.end() && segments_[*it].state_offset < chunk.end; ++it) {
    const Segment& s = segments_[*it];
    const int64_t a = std::max(chunk.begin, s.state_offset) - s.state_offset;
    const int64_t b = std::min(chunk.end, s.state_offset + s.numel()) - s.state_offset;
    if (a < b) fn(*it, a, b);
  }
}

Tensor AdamW::value_of(const StateStore::Chunk& c, size_t i, int64_t a, int64_t n) {
  const Segment& s = segments_[i];
  if (offloaded_values()) return c.state[3].flat_range(s.state_offset + a - c.begin, n);
  return s.value.flat_range(a, n);
}

Tensor AdamW::weights(size_t i) {
  const Segment& s = segments_[i];
  if (s.grad_dtype() == DType::kF32) {
    KIRI_CHECK(!offloaded_values(), "the values of ", s.param->name,
               " are offloaded: read them with read_weights");
    return s.value;
  }
  return master().flat_range(s.state_offset, s.numel());
}

void AdamW::read_weights(size_t i, int64_t begin, Tensor& dst) {
  const Segment& s = segments_[i];
  KIRI_CHECK(begin >= 0 && begin + dst.numel() <= s.numel(), "weights [", begin, ", ",
             begin + dst.numel(), ") of a segment of ", s.numel());
  const bool fp32 = s.grad_dtype() == DType::kF32;
  if (fp32 && !offloaded_values())
    dst.copy_from(s.value.flat_range(begin, dst.numel()));
  else
    states_.read(fp32 ? State::kValues : State::kMaster, s.state_offset + begin, dst);
}

void AdamW::write_weights(size_t i, int64_t begin, const Tensor& src) {
  const Segment& s = segments_[i];
  KIRI_CHECK(begin >= 0 && begin + src.numel() <= s.numel(), "weights [", begin, ", ",
             begin + src.numel(), ") of a segment of ", s.numel());
  const bool fp32 = s.grad_dtype() == DType::kF32;
  if (fp32 && !offloaded_values())
    s.value.flat_range(begin, src.numel()).copy_from(src);
  else
    states_.write(fp32 ? State::kValues : State::kMaster, s.state_offset + begin, src);
}

void AdamW::initialize(uint64_t seed) {
  // Each element is drawn at its index in the whole parameter, so a tensor-parallel
  // part (or a shard, or a chunk) gets the numbers the whole would have there.
  states_.for_each_chunk(0, kAllStates, [&](StateStore::Chunk& c) {
    for_pieces(c, [&](size_t i, int64_t a, int64_t b) {
      const Segment& s = segments_[i];
      const bool lowp = s.grad_dtype() != DType::kF32;
      Tensor value = value_of(c, i, a, b - a);
      Tensor w = lowp ? c.state[0].flat_range(s.state_offset + a - c.begin, b - a) : value;
      w.zero_();  // padding rows of a vocab-parallel table stay 0
      for (const nn::ElementRun& r : nn::element_runs(*s.param)) {
        const int64_t lo = std::max(r.local, s.begin + a),
                      hi = std::min(r.local + r.length, s.begin + b);
        if (lo >= hi) continue;
        Tensor part = w.flat_range(lo - s.begin - a, hi - lo);
        nn::init_values(part, s.param->init, seed, s.param->name, r.global + (lo - r.local));
      }
      if (lowp) kernels::convert(value, w);
    });
  });
}

void AdamW::write_back() {
  if (!has_master()) return;
  const unsigned values = offloaded_values() ? state_bit(State::kValues) : 0;
  states_.for_each_chunk(state_bit(State::kMaster), values, [&](StateStore::Chunk& c) {
    for_pieces(c, [&](size_t i, int64_t a, int64_t b) {
      const Segment& s = segments_[i];
      Tensor value = value_of(c, i, a, b - a);
      kernels::convert(value, c.state[0].flat_range(s.state_offset + a - c.begin, b - a));
    });
  });
}

double AdamW::grad_norm(double grad_divisor) const {
  Tensor sum = Tensor::zeros({1}, DType::kF64, Category::kBuffers, allocator_);
  // An offloaded gradient's sum of squares was taken by its writer, from the same
  // elements with the same kernel: the same number, added in the same order.
  for (const Segment& s : segments_)
    if (s.counted_in_norm)
      sum.data<double>()[0] += s.grad_offloaded() ? *s.grad_sq : kernels::sum_of_squares(s.grad);
  for (comm::Communicator* g : norm_groups_)
    if (g && g->size() > 1) g->all_reduce(sum, comm::ReduceOp::kSum);
  return std::sqrt(sum.data<double>()[0]) / grad_divisor;
}

void AdamW::step(double lr, double grad_scale) {
  begin_step(lr, grad_scale);
  finish_step();
}

void AdamW::set_zero_grads(bool on) {
  KIRI_CHECK(!on || !offloaded_grads(),
             "the update cannot zero gradients that are read from swap (offloaded)");
  zero_grads_ = on;
}

void AdamW::begin_step(double lr, double grad_scale) {
  ++step_;
  grads_zeroed_ = false;
  zeroing_pass_ = zero_grads_;
  kernels::AdamWParams hp;
  hp.lr = static_cast<float>(lr);
  hp.beta1 = static_cast<float>(cfg_.beta1);
  hp.beta2 = static_cast<float>(cfg_.beta2);
  hp.eps = static_cast<float>(cfg_.eps);
  hp.step = step_;
  hp.grad_scale = static_cast<float>(grad_scale);
  hp.zero_grad = zero_grads_;
  // 16-bit values are only written (rounded from the master); fp32 values are the weights.
  // Offloaded gradients are only read.
  unsigned read = has_master() ? kAllStates & ~state_bit(State::kValues) : kAllStates;
  if (offloaded_grads()) read |= state_bit(State::kGrads);
  states_.begin_pass(read, kAllStates, [this, hp](StateStore::Chunk& c) mutable {
    for_pieces(c, [&](size_t i, int64_t a, int64_t b) {
      const Segment& s = segments_[i];
      hp.weight_decay = s.param->weight_decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
      const int64_t at = s.state_offset + a - c.begin, n = b - a;
      const bool lowp = s.grad_dtype() != DType::kF32;
      Tensor value = value_of(c, i, a, n);
      Tensor p = lowp ? c.state[0].flat_range(at, n) : value;
      Tensor m = c.state[1].flat_range(at, n), v = c.state[2].flat_range(at, n);
      Tensor g = s.grad_offloaded() ? c.state[4].flat_range(at, n) : s.grad.flat_range(a, n);
      kernels::adamw_update(p, g, m, v, hp, lowp ? &value : nullptr);
    });
  });
}

void AdamW::update_through(int64_t state_end) {
  KIRI_CHECK(step_pending(), "update_through() without a step begun");
  // Offloaded values are read from their files next (the engine's all-gather): their
  // writes must have landed. Values in memory are updated in place.
  states_.advance_pass(state_end, offloaded_values());
}

void AdamW::finish_step() {
  states_.finish_pass();
  // Every segment's gradient was read (and zeroed) only when a pass ran to its end.
  grads_zeroed_ = std::exchange(zeroing_pass_, false);
}

double AdamW::clip_and_step(double lr, double loss_scale) {
  const double norm = clip_and_begin_step(lr, loss_scale);
  finish_step();
  return norm;
}

double AdamW::clip_and_begin_step(double lr, double loss_scale) {
  const double norm = grad_norm(loss_scale);
  if (!std::isfinite(norm)) return norm;
  double clip = 1.0;
  if (cfg_.grad_clip > 0 && norm > cfg_.grad_clip) clip = cfg_.grad_clip / (norm + 1e-6);
  begin_step(lr, clip / loss_scale);
  return norm;
}

}  // namespace kiri::optim
