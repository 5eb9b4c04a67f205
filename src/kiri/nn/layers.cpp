#include "kiri/nn/layers.h"

#include <omp.h>

#include <type_traits>

#include "kiri/kernels/cpu/ops.h"
#include "kiri/nn/mixed.h"

namespace kiri::nn {

namespace k = kiri::kernels;

template <typename T>
Linear<T>::Linear(const std::string& name, int64_t in, int64_t out, double init_std, TpLinear tp,
                  LinearLayout layout)
    : Module(name), tp_(tp), layout_(layout) {
  const int p = tp.group ? tp.group->size() : 1, i = tp.group ? tp.group->rank() : 0;
  const bool conv = layout == LinearLayout::kConv1D;
  // The weight's shape for `rows` inputs and `cols` outputs, in this layout.
  const auto shape = [conv](int64_t rows, int64_t cols) {
    return conv ? Shape{rows, cols} : Shape{cols, rows};
  };
  const int in_dim = conv ? 0 : 1, out_dim = conv ? 1 : 0;  // the weight's dims
  const InitSpec init{InitKind::kNormal, init_std};
  if (tp.mode == TpLinear::Mode::kNone || p == 1) {
    tp_.mode = TpLinear::Mode::kNone;
    weight_ = &add_parameter("weight", shape(in, out), true, init);
    if (conv) bias_ = &add_parameter("bias", {out}, false, {InitKind::kZeros});
  } else if (tp.mode == TpLinear::Mode::kColumn) {
    KIRI_CHECK_KIND(kConfig, out % (int64_t{p} * tp.blocks) == 0, name, ": ", out,
                    " output columns (", tp.blocks, " blocks) do not split over parallel.tp = ", p);
    // element_runs cuts the rows of an [out, in] matrix in one piece per rank.
    KIRI_CHECK(conv || tp.blocks == 1, name, ": an [out, in] weight is cut in one block");
    weight_ = &add_parameter("weight", shape(in, out / p), true, init, shape(in, out),
                             {out_dim, p, i, tp.blocks});
    if (conv)
      bias_ =
          &add_parameter("bias", {out / p}, false, {InitKind::kZeros}, {out}, {0, p, i, tp.blocks});
  } else {
    KIRI_CHECK_KIND(kConfig, in % p == 0, name, ": ", in,
                    " input rows do not split over parallel.tp = ", p);
    weight_ =
        &add_parameter("weight", shape(in / p, out), true, init, shape(in, out), {in_dim, p, i, 1});
    if (conv) bias_ = &add_parameter("bias", {out}, false, {InitKind::kZeros});
  }
}

using detail::accumulate_grad;
using detail::compute_copy;
using detail::grad_target;
using detail::lowp;

template <typename T>
Tensor Linear<T>::forward(Context& ctx, const Tensor& x) {
  const bool conv = layout_ == LinearLayout::kConv1D;
  const int64_t out = weight_->shape[conv ? 1 : 0];
  Tensor y = activation(ctx, {x.dim(0), out}, dtype_of<T>());  // [N, out]
  const bool row = tp_.mode == TpLinear::Mode::kRow;
  // Row parallel: the partial products are summed over the group first, the
  // whole bias added after (Megatron's g).
  const Tensor bias = row || !bias_ ? Tensor() : bias_->value;
  if (lowp<T>(weight_->value)) {
    // Mixed precision: the 16-bit copy of x is both the GEMM's input and what
    // backward keeps (half the bytes of x). Layers that feed one x to several
    // Linears convert it once and pass the copy.
    Tensor xl = x;
    if (x.dtype() != weight_->value.dtype()) {
      xl = activation(ctx, x.shape(), weight_->value.dtype());  // [N, in]
      k::convert(xl, x);
    }
    if (conv)
      k::linear_forward_lowp(y, xl, weight_->value, bias);
    else
      k::linear_nt_forward_lowp(y, xl, weight_->value);
    if (ctx.training) x_.put(ctx) = xl;
  } else {
    if (ctx.training) x_.put(ctx) = x;
    if (conv)
      k::linear_forward<T>(y, x, weight_->value, bias);
    else
      k::linear_nt_forward<T>(y, x, weight_->value);
  }
  if (row) {
    tp_.group->all_reduce(y, comm::ReduceOp::kSum);
    if (!bias_) return y;
    const Tensor b = compute_copy<T>(ctx, bias_->value);  // [out]
    const int64_t n = y.dim(0);
    T* yd = y.data<T>();
    const T* bd = b.data<T>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < out; ++j) yd[r * out + j] += bd[j];
  }
  return y;
}

template <typename T>
void Linear<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx, bool reduce_dx) {
  const Tensor x = x_.take(ctx, "Linear");
  // Column parallel: this rank's dx is a partial sum over the output
  // columns; it is computed apart and all-reduced (Megatron's f backward),
  // unless the caller sums several layers' partials first (reduce_dx false).
  const bool column = tp_.mode == TpLinear::Mode::kColumn && dx.defined() && reduce_dx;
  Tensor dx_part = column ? activation_zeros(ctx, dx.shape(), dtype_of<T>()) : dx;
  Tensor no_bias;
  Tensor& dbias = bias_ ? bias_->grad : no_bias;
  const bool conv = layout_ == LinearLayout::kConv1D;
  if (lowp<T>(weight_->value)) {
    if (conv)
      k::linear_backward_lowp(dx_part, weight_->grad, dbias, dy, x, weight_->value, ctx.allocator);
    else
      k::linear_nt_backward_lowp(dx_part, weight_->grad, dy, x, weight_->value, ctx.allocator);
  } else if (conv) {
    k::linear_backward<T>(dx_part, weight_->grad, dbias, dy, x, weight_->value);
  } else {
    k::linear_nt_backward<T>(dx_part, weight_->grad, dy, x, weight_->value);
  }
  if (column) reduce_input_grad(dx_part, dx);
  ctx.progress();
}

template <typename T>
void Linear<T>::reduce_input_grad(Tensor& partial, Tensor& dx) const {
  if (tp_.mode == TpLinear::Mode::kColumn) tp_.group->all_reduce(partial, comm::ReduceOp::kSum);
  k::residual_forward<T>(dx, dx, partial);
}

template <typename T>
LayerNorm<T>::LayerNorm(const std::string& name, int64_t channels) : RowLayer<T>(name) {
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
CausalSelfAttention<T>::CausalSelfAttention(const std::string& name, int64_t channels, int n_head,
                                            double init_std, double proj_init_std,
                                            comm::Communicator* tp)
    : SequenceLayer<T>(name),
      n_head_(n_head / (tp ? tp->size() : 1)),
      c_attn_(this->child_name("c_attn"), channels, 3 * channels, init_std,
              {TpLinear::Mode::kColumn, tp, 3}),
      c_proj_(this->child_name("c_proj"), channels, channels, proj_init_std,
              {TpLinear::Mode::kRow, tp, 1}) {
  KIRI_CHECK_KIND(kConfig, n_head % (tp ? tp->size() : 1) == 0,
                  "parallel.tp = ", tp ? tp->size() : 1, " must divide model.n_head = ", n_head);
  this->add_child(c_attn_);
  this->add_child(c_proj_);
}

template <typename T>
Tensor CausalSelfAttention<T>::forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
  Tensor qkv3 = c_attn_.forward(ctx, x);  // [N, 3C/p]: this rank's heads of q, k and v
  const int64_t c = qkv3.dim(1) / 3;
  Tensor qkv = qkv3.view({batch, seq, 3 * c});                         // [B,T,3C]
  Tensor att = activation(ctx, {batch, seq, c}, dtype_of<T>());        // [B,T,C]
  Tensor lse = activation(ctx, {batch, n_head_, seq}, dtype_of<T>());  // [B,H,T]
  Tensor scratch = Tensor::empty({k::attention_scratch_numel(seq, omp_get_max_threads())},
                                 dtype_of<T>(), Category::kBuffers, ctx.allocator);
  k::attention_forward<T>(att, lse, qkv, n_head_, scratch);
  if (ctx.training) saved_.put(ctx) = {batch, seq, qkv, att, lse};
  return c_proj_.forward(ctx, att.view({batch * seq, c}));
}

template <typename T>
void CausalSelfAttention<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  State s = saved_.take(ctx, "CausalSelfAttention");
  const int64_t c = s.att.dim(2);  // this rank's heads' width
  Tensor datt = activation_zeros(ctx, {s.batch * s.seq, c}, dtype_of<T>());  // [N, C]
  c_proj_.backward(ctx, dy, datt);
  Tensor dqkv = activation_zeros(ctx, {s.batch, s.seq, 3 * c}, dtype_of<T>());  // [B,T,3C]
  Tensor scratch = Tensor::empty({k::attention_scratch_numel(s.seq, omp_get_max_threads())},
                                 dtype_of<T>(), Category::kBuffers, ctx.allocator);
  Tensor datt3 = datt.view({s.batch, s.seq, c});
  k::attention_backward<T>(dqkv, datt3, s.qkv, s.att, s.lse, n_head_, scratch);
  ctx.progress();
  const int64_t n = s.batch * s.seq;
  s = State();  // drop the saved activations before c_attn's backward
  Tensor dqkv2 = dqkv.view({n, 3 * c});
  c_attn_.backward(ctx, dqkv2, dx);
}

template <typename T>
Mlp<T>::Mlp(const std::string& name, int64_t channels, double init_std, double proj_init_std,
            comm::Communicator* tp)
    : RowLayer<T>(name),
      c_fc_(this->child_name("c_fc"), channels, 4 * channels, init_std,
            {TpLinear::Mode::kColumn, tp, 1}),
      c_proj_(this->child_name("c_proj"), 4 * channels, channels, proj_init_std,
              {TpLinear::Mode::kRow, tp, 1}) {
  this->add_child(c_fc_);
  this->add_child(c_proj_);
}

template <typename T>
Tensor Mlp<T>::forward(Context& ctx, const Tensor& x) {
  Tensor h = c_fc_.forward(ctx, x);                      // [N, 4C]
  Tensor g = activation(ctx, h.shape(), dtype_of<T>());  // [N, 4C]
  k::gelu_forward<T>(g, h);
  if (ctx.training) h_.put(ctx) = h;
  return c_proj_.forward(ctx, g);
}

template <typename T>
void Mlp<T>::backward(Context& ctx, const Tensor& dy, Tensor& dx) {
  Tensor h = h_.take(ctx, "Mlp");
  Tensor dg = activation_zeros(ctx, h.shape(), dtype_of<T>());  // [N, 4C]
  c_proj_.backward(ctx, dy, dg);
  Tensor dh = activation_zeros(ctx, h.shape(), dtype_of<T>());  // [N, 4C]
  k::gelu_backward<T>(dh, h, dg);
  h = Tensor();
  c_fc_.backward(ctx, dh, dx);
}

template class Linear<float>;
template class Linear<double>;
template class LayerNorm<float>;
template class LayerNorm<double>;
template class CausalSelfAttention<float>;
template class CausalSelfAttention<double>;
template class Mlp<float>;
template class Mlp<double>;

}  // namespace kiri::nn
