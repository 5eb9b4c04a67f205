#include "kiri/nn/llama_layers.h"

#include <omp.h>

#include <initializer_list>
#include <utility>

#include "kiri/nn/mixed.h"

namespace kiri::nn {

namespace k = kiri::kernels;

using detail::accumulate_grad;
using detail::compute_copy;
using detail::grad_target;

namespace {

// The input of several projections: under mixed precision its 16-bit copy,
// converted once (each Linear would otherwise convert and keep its own).
template <typename T>
Tensor shared_input(Context& ctx, const Tensor& x, const Tensor& weight) {
  if (!detail::lowp<T>(weight)) return x;
  Tensor xl = activation(ctx, x.shape(), weight.dtype());  // [N, C] 16-bit
  k::convert(xl, x);
  return xl;
}

// Backward of projections that read the same x (q, k, v; gate, up): under
// tensor parallelism their partial input gradients are summed first and
// all-reduced once (Megatron's f backward, once for all of them).
template <typename T>
void fan_in_backward(Context& ctx, comm::Communicator* tp,
                     std::initializer_list<std::pair<Linear<T>*, Tensor>> layers, Tensor& dx) {
  if (!tp || !dx.defined()) {
    for (const auto& [layer, dy] : layers) layer->backward(ctx, dy, dx);
    return;
  }
  Tensor partial = activation_zeros(ctx, dx.shape(), dtype_of<T>());  // [N, C]
  for (const auto& [layer, dy] : layers) layer->backward(ctx, dy, partial, false);
  layers.begin()->first->reduce_input_grad(partial, dx);
}

Tensor attention_scratch(Context& ctx, int64_t seq, DType dtype) {
  return Tensor::empty({k::attention_scratch_numel(seq, omp_get_max_threads())}, dtype,
                       Category::kBuffers, ctx.allocator);
}

// This rank's query heads, once tp divides both head counts.
int heads_per_rank(int n_head, int n_kv_head, comm::Communicator* tp) {
  const int p = tp ? tp->size() : 1;
  KIRI_CHECK_KIND(kConfig, n_kv_head >= 1 && n_head % n_kv_head == 0,
                  "model.num_key_value_heads = ", n_kv_head,
                  " must divide model.n_head = ", n_head);
  KIRI_CHECK_KIND(kConfig, n_head % p == 0 && n_kv_head % p == 0, "parallel.tp = ", p,
                  " must divide both model.n_head = ", n_head,
                  " and model.num_key_value_heads = ", n_kv_head,
                  " (tensor parallelism splits the query and the key/value heads)");
  return n_head / p;
}

}  // namespace

RopeTable::RopeTable(int64_t positions, int64_t head_dim, const kernels::RopeParams& params,
                     DType dtype) {
  const std::vector<double> inv_freq = k::rope_inv_freq(head_dim, params);
  const Shape shape{positions, head_dim / 2};
  cos_ = Tensor::empty(shape, dtype, Category::kBuffers, allocator_);
  sin_ = Tensor::empty(shape, dtype, Category::kBuffers, allocator_);
  if (dtype == DType::kF64)
    k::rope_table<double>(cos_, sin_, inv_freq);
  else
    k::rope_table<float>(cos_, sin_, inv_freq);
}

template <typename T>
RmsNorm<T>::RmsNorm(const std::string& name, int64_t channels, double eps)
    : RowLayer<T>(name), eps_(eps) {
  weight_ = &this->add_parameter("weight", {channels}, false, {InitKind::kOnes});
}

template <typename T>
Tensor RmsNorm<T>::forward(Context& ctx, const Tensor& x) {
  Tensor rstd = activation(ctx, {x.dim(0)}, dtype_of<T>());  // [N]
  Tensor y = activation(ctx, x.shape(), dtype_of<T>());      // [N, C]
  k::rmsnorm_forward<T>(y, rstd, x, compute_copy<T>(ctx, weight_->value), eps_);
  if (ctx.training) saved_.put(ctx) = {x, rstd};
  return y;
}

template <typename T>
void RmsNorm<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  Tensor dw = grad_target<T>(ctx, weight_->grad);  // [C]
  const State s = saved_.take(ctx, "RmsNorm");
  k::rmsnorm_backward<T>(dx, dw, dy, s.x, compute_copy<T>(ctx, weight_->value), s.rstd);
  accumulate_grad<T>(weight_->grad, dw);
}

template <typename T>
LlamaAttention<T>::LlamaAttention(const std::string& name, int64_t channels, int n_head,
                                  int n_kv_head, double init_std,
                                  std::shared_ptr<const RopeTable> rope, comm::Communicator* tp)
    : SequenceLayer<T>(name),
      n_head_(heads_per_rank(n_head, n_kv_head, tp)),
      n_kv_head_(n_kv_head / (tp ? tp->size() : 1)),
      rope_(std::move(rope)),
      tp_(tp),
      q_proj_(this->child_name("q_proj"), channels, channels, init_std,
              {TpLinear::Mode::kColumn, tp, 1}, LinearLayout::kOutInNoBias),
      k_proj_(this->child_name("k_proj"), channels, channels / n_head * n_kv_head, init_std,
              {TpLinear::Mode::kColumn, tp, 1}, LinearLayout::kOutInNoBias),
      v_proj_(this->child_name("v_proj"), channels, channels / n_head * n_kv_head, init_std,
              {TpLinear::Mode::kColumn, tp, 1}, LinearLayout::kOutInNoBias),
      o_proj_(this->child_name("o_proj"), channels, channels, init_std,
              {TpLinear::Mode::kRow, tp, 1}, LinearLayout::kOutInNoBias) {
  KIRI_CHECK(rope_ && rope_->cos().dim(1) * 2 == channels / n_head, this->name(),
             ": the rotary table does not fit heads of ", channels / n_head);
  for (Linear<T>* l : {&q_proj_, &k_proj_, &v_proj_, &o_proj_}) this->add_child(*l);
}

template <typename T>
Tensor LlamaAttention<T>::forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
  const Tensor xin = shared_input<T>(ctx, x, q_proj_.weight().value);
  const Tensor q2 = q_proj_.forward(ctx, xin);           // [N, Hq*hs]: this rank's query heads
  const Tensor k2 = k_proj_.forward(ctx, xin);           // [N, Hkv*hs]: its key/value heads
  const Tensor v2 = v_proj_.forward(ctx, xin);           // [N, Hkv*hs]
  Tensor q = q2.view({batch, seq, q2.dim(1)});           // [B,T,Hq*hs]
  Tensor k = k2.view({batch, seq, k2.dim(1)});           // [B,T,Hkv*hs]
  Tensor v = v2.view({batch, seq, v2.dim(1)});           // [B,T,Hkv*hs]
  k::rope_forward<T>(q, q, rope_->cos(), rope_->sin());  // in place: the rotated q is kept
  k::rope_forward<T>(k, k, rope_->cos(), rope_->sin());
  Tensor att = activation(ctx, q.shape(), dtype_of<T>());              // [B,T,Hq*hs]
  Tensor lse = activation(ctx, {batch, n_head_, seq}, dtype_of<T>());  // [B,Hq,T]
  Tensor scratch = attention_scratch(ctx, seq, dtype_of<T>());
  k::gqa_attention_forward<T>(att, lse, q, k, v, n_head_, n_kv_head_, scratch);
  if (ctx.training) saved_.put(ctx) = {batch, seq, q, k, v, att, lse};
  return o_proj_.forward(ctx, att.view({batch * seq, att.dim(2)}));
}

template <typename T>
void LlamaAttention<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  State s = saved_.take(ctx, "LlamaAttention");
  const int64_t b = s.batch, t = s.seq, n = b * t, wq = s.q.dim(2), wk = s.k.dim(2);
  const DType dt = dtype_of<T>();
  Tensor datt = activation_zeros(ctx, {n, wq}, dt);  // [N, Hq*hs]
  o_proj_.backward(ctx, dy, datt);
  Tensor dq = activation_zeros(ctx, {b, t, wq}, dt);  // [B,T,Hq*hs] of the rotated q
  Tensor dk = activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs] of the rotated k
  Tensor dv = activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs]
  Tensor scratch = attention_scratch(ctx, t, dt);
  k::gqa_attention_backward<T>(dq, dk, dv, datt.view({b, t, wq}), s.q, s.k, s.v, s.att, s.lse,
                               n_head_, n_kv_head_, scratch);
  ctx.progress();
  s = State();  // drop the saved activations before the projections' backward
  datt = scratch = Tensor();
  // Back through the rotation (its transpose turns the other way).
  Tensor dq0 = activation_zeros(ctx, {b, t, wq}, dt);  // [B,T,Hq*hs]
  k::rope_backward<T>(dq0, dq, rope_->cos(), rope_->sin());
  dq = Tensor();
  Tensor dk0 = activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs]
  k::rope_backward<T>(dk0, dk, rope_->cos(), rope_->sin());
  dk = Tensor();
  fan_in_backward<T>(
      ctx, tp_,
      {{&q_proj_, dq0.view({n, wq})}, {&k_proj_, dk0.view({n, wk})}, {&v_proj_, dv.view({n, wk})}},
      dx);
}

template <typename T>
SwiGluMlp<T>::SwiGluMlp(const std::string& name, int64_t channels, int64_t hidden, double init_std,
                        comm::Communicator* tp)
    : RowLayer<T>(name),
      tp_(tp),
      gate_proj_(this->child_name("gate_proj"), channels, hidden, init_std,
                 {TpLinear::Mode::kColumn, tp, 1}, LinearLayout::kOutInNoBias),
      up_proj_(this->child_name("up_proj"), channels, hidden, init_std,
               {TpLinear::Mode::kColumn, tp, 1}, LinearLayout::kOutInNoBias),
      down_proj_(this->child_name("down_proj"), hidden, channels, init_std,
                 {TpLinear::Mode::kRow, tp, 1}, LinearLayout::kOutInNoBias) {
  for (Linear<T>* l : {&gate_proj_, &up_proj_, &down_proj_}) this->add_child(*l);
}

template <typename T>
Tensor SwiGluMlp<T>::forward(Context& ctx, const Tensor& x) {
  const Tensor xin = shared_input<T>(ctx, x, gate_proj_.weight().value);
  Tensor gate = gate_proj_.forward(ctx, xin);               // [N, I]
  Tensor up = up_proj_.forward(ctx, xin);                   // [N, I]
  Tensor h = activation(ctx, gate.shape(), dtype_of<T>());  // [N, I]
  k::swiglu_forward<T>(h, gate, up);
  if (ctx.training) saved_.put(ctx) = {gate, up};
  return down_proj_.forward(ctx, h);
}

template <typename T>
void SwiGluMlp<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  State s = saved_.take(ctx, "SwiGluMlp");
  const DType dt = dtype_of<T>();
  Tensor dh = activation_zeros(ctx, s.gate.shape(), dt);  // [N, I]
  down_proj_.backward(ctx, dy, dh);
  Tensor dgate = activation_zeros(ctx, s.gate.shape(), dt);  // [N, I]
  Tensor dup = activation_zeros(ctx, s.gate.shape(), dt);    // [N, I]
  k::swiglu_backward<T>(dgate, dup, s.gate, s.up, dh);
  s = State();
  dh = Tensor();
  fan_in_backward<T>(ctx, tp_, {{&gate_proj_, dgate}, {&up_proj_, dup}}, dx);
}

template class RmsNorm<float>;
template class RmsNorm<double>;
template class LlamaAttention<float>;
template class LlamaAttention<double>;
template class SwiGluMlp<float>;
template class SwiGluMlp<double>;

}  // namespace kiri::nn
