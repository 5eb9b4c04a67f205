#include "kiri/nn/llama_layers.h"

#include "kiri/nn/mixed.h"

namespace kiri::nn {

namespace k = kiri::kernels;

using detail::accumulate_grad;
using detail::compute_copy;
using detail::grad_target;

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
    : NormLayer<T>(name), eps_(eps) {
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
Tensor RmsNorm<T>::forward_residual(Context& ctx, const Tensor& a, const Tensor& b, Tensor& sum) {
  Tensor rstd = activation(ctx, {sum.dim(0)}, dtype_of<T>());  // as forward(sum) allocates them
  Tensor y = activation(ctx, sum.shape(), dtype_of<T>());      // [N, C]
  k::residual_rmsnorm_forward<T>(sum, y, rstd, a, b, compute_copy<T>(ctx, weight_->value), eps_);
  if (ctx.training) saved_.put(ctx) = {sum, rstd};
  return y;
}

template <typename T>
void RmsNorm<T>::backward_residual(Context& ctx, const Tensor& dy, const Tensor& dbase,
                                   const Tensor& dskip, Tensor& dx) {
  Tensor dw = grad_target<T>(ctx, weight_->grad);  // [C]
  const State s = saved_.take(ctx, "RmsNorm");
  k::rmsnorm_backward_residual<T>(dx, dbase, dskip, dw, dy, s.x,
                                  compute_copy<T>(ctx, weight_->value), s.rstd);
  accumulate_grad<T>(weight_->grad, dw);
}

template <typename T>
Tensor RmsNorm<T>::recompute_output(Context& ctx) {
  const State& s = saved_.peek(ctx, "RmsNorm");
  Tensor rstd = activation(ctx, {s.x.dim(0)}, dtype_of<T>());  // [N], equal to the saved one
  Tensor y = activation(ctx, s.x.shape(), dtype_of<T>());      // [N, C]
  k::rmsnorm_forward<T>(y, rstd, s.x, compute_copy<T>(ctx, weight_->value), eps_);
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
Tensor GqaAttentionCore<T>::forward(Context& ctx, const Tensor& q, const Tensor& k,
                                    const Tensor& v) {
  const int64_t b = q.dim(0), t = q.dim(1);
  Tensor att = activation(ctx, q.shape(), dtype_of<T>());        // [B,T,Hq*hs]
  Tensor lse = activation(ctx, {b, n_head_, t}, dtype_of<T>());  // [B,Hq,T]
  Tensor scratch = attention_scratch(ctx, t, dtype_of<T>());
  k::gqa_attention_forward<T>(att, lse, q, k, v, n_head_, n_kv_head_, scratch);
  if (ctx.training)
    saved_.put(ctx) = recompute_ ? State{q, k, v, {}, {}} : State{q, k, v, att, lse};
  return att;
}

template <typename T>
void GqaAttentionCore<T>::backward(Context& ctx, const Tensor& datt, Tensor& dq, Tensor& dk,
                                   Tensor& dv) {
  State s = saved_.take(ctx, "GqaAttentionCore");
  const int64_t b = s.q.dim(0), t = s.q.dim(1);
  Tensor scratch = attention_scratch(ctx, t, dtype_of<T>());
  if (recompute_) {
    s.att = activation(ctx, s.q.shape(), dtype_of<T>());      // [B,T,Hq*hs]
    s.lse = activation(ctx, {b, n_head_, t}, dtype_of<T>());  // [B,Hq,T]
    k::gqa_attention_forward<T>(s.att, s.lse, s.q, s.k, s.v, n_head_, n_kv_head_, scratch);
  }
  k::gqa_attention_backward<T>(dq, dk, dv, datt, s.q, s.k, s.v, s.att, s.lse, n_head_, n_kv_head_,
                               scratch);
  ctx.progress();
}

template class RmsNorm<float>;
template class RmsNorm<double>;
template class GqaAttentionCore<float>;
template class GqaAttentionCore<double>;

}  // namespace kiri::nn
