#include "kiri/nn/layers.h"

#include <omp.h>

#include <type_traits>

#include "kiri/kernels/ops.h"
#include "kiri/nn/mixed.h"

namespace kiri::nn {

namespace k = kiri::kernels;

using detail::accumulate_grad;
using detail::compute_copy;
using detail::grad_target;
using detail::lowp;

Shape linear_weight_shape(LinearLayout layout, int64_t in, int64_t out) {
  return layout == LinearLayout::kConv1D ? Shape{in, out} : Shape{out, in};
}

int linear_input_dim(LinearLayout layout) {
  return layout == LinearLayout::kConv1D ? 0 : 1;
}

template <typename T>
Tensor gemm_input(Context& ctx, const Tensor& x, const Tensor& weight) {
  if (!lowp<T>(weight) || x.dtype() == weight.dtype()) return x;
  Tensor xl = activation(ctx, x.shape(), weight.dtype());  // [N, in] 16-bit
  k::convert(xl, x);
  return xl;
}

template <typename T>
void linear_apply(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  LinearLayout layout) {
  const bool conv = layout == LinearLayout::kConv1D;
  if (lowp<T>(weight)) {
    if (conv)
      k::linear_forward_lowp(y, x, weight, bias);
    else
      k::linear_nt_forward_lowp(y, x, weight);
  } else if (conv) {
    k::linear_forward<T>(y, x, weight, bias);
  } else {
    k::linear_nt_forward<T>(y, x, weight);
  }
}

template <typename T>
void linear_grads(Context& ctx, Tensor& dx, Parameter& weight, Parameter* bias, const Tensor& dy,
                  const Tensor& x, LinearLayout layout) {
  Tensor no_bias;
  Tensor& dbias = bias ? bias->grad : no_bias;
  const bool conv = layout == LinearLayout::kConv1D;
  if (lowp<T>(weight.value)) {
    if (conv)
      k::linear_backward_lowp(dx, weight.grad, dbias, dy, x, weight.value, ctx.allocator);
    else
      k::linear_nt_backward_lowp(dx, weight.grad, dy, x, weight.value, ctx.allocator);
  } else if (conv) {
    k::linear_backward<T>(dx, weight.grad, dbias, dy, x, weight.value);
  } else {
    k::linear_nt_backward<T>(dx, weight.grad, dy, x, weight.value);
  }
  ctx.progress();
}

template <typename T>
LayerNorm<T>::LayerNorm(const std::string& name, int64_t channels) : NormLayer<T>(name) {
  weight_ = &this->add_parameter("weight", {channels}, false, {InitKind::kOnes});
  bias_ = &this->add_parameter("bias", {channels}, false, {InitKind::kZeros});
}

template <typename T>
Tensor LayerNorm<T>::forward(Context& ctx, const Tensor& x) {
  const int64_t n = x.dim(0);
  Tensor mean = activation(ctx, {n}, dtype_of<T>());
  Tensor rstd = activation(ctx, {n}, dtype_of<T>());
  Tensor y = activation(ctx, x.shape(), dtype_of<T>());  // [N, C]
  k::layernorm_forward<T>(y, mean, rstd, x, compute_copy<T>(ctx, weight_->value),
                          compute_copy<T>(ctx, bias_->value));
  if (ctx.training) saved_.put(ctx) = {x, mean, rstd};
  return y;
}

template <typename T>
void LayerNorm<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  Tensor dw = grad_target<T>(ctx, weight_->grad), db = grad_target<T>(ctx, bias_->grad);  // [C]
  const State s = saved_.take(ctx, "LayerNorm");
  k::layernorm_backward<T>(dx, dw, db, dy, s.x, compute_copy<T>(ctx, weight_->value), s.mean,
                           s.rstd);
  accumulate_grad<T>(weight_->grad, dw);
  accumulate_grad<T>(bias_->grad, db);
}

template <typename T>
Tensor LayerNorm<T>::forward_residual(Context& ctx, const Tensor& a, const Tensor& b, Tensor& sum) {
  const int64_t n = sum.dim(0);
  Tensor mean = activation(ctx, {n}, dtype_of<T>());  // as forward(sum) allocates them
  Tensor rstd = activation(ctx, {n}, dtype_of<T>());
  Tensor y = activation(ctx, sum.shape(), dtype_of<T>());  // [N, C]
  k::residual_layernorm_forward<T>(sum, y, mean, rstd, a, b, compute_copy<T>(ctx, weight_->value),
                                   compute_copy<T>(ctx, bias_->value));
  if (ctx.training) saved_.put(ctx) = {sum, mean, rstd};
  return y;
}

template <typename T>
void LayerNorm<T>::backward_residual(Context& ctx, const Tensor& dy, const Tensor& dbase,
                                     const Tensor& dskip, Tensor& dx) {
  Tensor dw = grad_target<T>(ctx, weight_->grad), db = grad_target<T>(ctx, bias_->grad);  // [C]
  const State s = saved_.take(ctx, "LayerNorm");
  k::layernorm_backward_residual<T>(dx, dbase, dskip, dw, db, dy, s.x,
                                    compute_copy<T>(ctx, weight_->value), s.mean, s.rstd);
  accumulate_grad<T>(weight_->grad, dw);
  accumulate_grad<T>(bias_->grad, db);
}

template <typename T>
Tensor LayerNorm<T>::recompute_output(Context& ctx) {
  const State& s = saved_.peek(ctx, "LayerNorm");
  const int64_t n = s.x.dim(0);
  Tensor mean = activation(ctx, {n}, dtype_of<T>());  // [N], equal to the saved ones
  Tensor rstd = activation(ctx, {n}, dtype_of<T>());
  Tensor y = activation(ctx, s.x.shape(), dtype_of<T>());  // [N, C]
  k::layernorm_forward<T>(y, mean, rstd, s.x, compute_copy<T>(ctx, weight_->value),
                          compute_copy<T>(ctx, bias_->value));
  return y;
}

Tensor attention_scratch(Context& ctx, int64_t seq, DType dtype) {
  return Tensor::empty({k::attention_scratch_numel(seq, omp_get_max_threads())}, dtype,
                       Category::kBuffers, ctx.allocator);
}

template <typename T>
Tensor CausalAttentionCore<T>::forward(Context& ctx, const Tensor& qkv) {
  const int64_t b = qkv.dim(0), t = qkv.dim(1), c = qkv.dim(2) / 3;
  Tensor att = activation(ctx, {b, t, c}, dtype_of<T>());        // [B,T,C']
  Tensor lse = activation(ctx, {b, n_head_, t}, dtype_of<T>());  // [B,H,T]
  Tensor scratch = attention_scratch(ctx, t, dtype_of<T>());
  k::attention_forward<T>(att, lse, qkv, n_head_, scratch);
  if (ctx.training) saved_.put(ctx) = recompute_ ? State{qkv, {}, {}} : State{qkv, att, lse};
  return att;
}

template <typename T>
void CausalAttentionCore<T>::backward(Context& ctx, const Tensor& datt, Tensor& dqkv) {
  State s = saved_.take(ctx, "CausalAttentionCore");
  const int64_t b = s.qkv.dim(0), t = s.qkv.dim(1);
  Tensor scratch = attention_scratch(ctx, t, dtype_of<T>());
  if (recompute_) {
    s.att = activation(ctx, {b, t, s.qkv.dim(2) / 3}, dtype_of<T>());  // [B,T,C']
    s.lse = activation(ctx, {b, n_head_, t}, dtype_of<T>());           // [B,H,T]
    k::attention_forward<T>(s.att, s.lse, s.qkv, n_head_, scratch);
  }
  k::attention_backward<T>(dqkv, datt, s.qkv, s.att, s.lse, n_head_, scratch);
  ctx.progress();
}

#define KIRI_NN_LINEAR(T)                                                                 \
  template Tensor gemm_input<T>(Context&, const Tensor&, const Tensor&);                  \
  template void linear_apply<T>(Tensor&, const Tensor&, const Tensor&, const Tensor&,     \
                                LinearLayout);                                            \
  template void linear_grads<T>(Context&, Tensor&, Parameter&, Parameter*, const Tensor&, \
                                const Tensor&, LinearLayout);
KIRI_NN_LINEAR(float)
KIRI_NN_LINEAR(double)
#undef KIRI_NN_LINEAR
template class LayerNorm<float>;
template class LayerNorm<double>;
template class CausalAttentionCore<float>;
template class CausalAttentionCore<double>;

}  // namespace kiri::nn
