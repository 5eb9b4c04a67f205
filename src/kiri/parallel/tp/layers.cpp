#include "kiri/parallel/tp/layers.h"

#include "kiri/kernels/ops.h"
#include "kiri/nn/mixed.h"
#include "kiri/parallel/tp/mappings.h"
#include "kiri/parallel/tp/utils.h"

namespace kiri::parallel::tp {

namespace k = kiri::kernels;

int64_t TensorParallel::local_rows(int64_t rows) const {
  if (!split_sequence()) return rows;
  return divide(rows, size(),
                "parallel.sequence_parallel: the micro-batch's token rows (micro_batch x "
                "seq_len) over parallel.tp");
}

template <typename T>
Tensor ColumnParallelInput<T>::region(nn::Context& ctx, const Tensor& x, const Tensor& weight) {
  Tensor full = x;  // [N, C]
  if (tp_.split_sequence()) {
    full = nn::activation(ctx, {x.dim(0) * tp_.size(), x.dim(1)}, dtype_of<T>());  // [N, C]
    GatherFromSequence::forward(*tp_.group, x, full);
  }
  return nn::gemm_input<T>(ctx, full, weight);  // [N, C]
}

template <typename T>
Tensor ColumnParallelInput<T>::forward(nn::Context& ctx, const Tensor& x, const Tensor& weight) {
  const Tensor xin = region(ctx, x, weight);  // [N, C]
  if (ctx.training && !source_) x_.put(ctx) = xin;
  return xin;
}

template <typename T>
Tensor ColumnParallelInput<T>::saved_input(nn::Context& ctx, const Tensor& weight) {
  if (!source_) return x_.take(ctx, "ColumnParallelInput");
  return region(ctx, source_(ctx), weight);
}

template <typename T>
Tensor ColumnParallelInput<T>::grad_target(nn::Context& ctx, Tensor& dx, int64_t rows) const {
  if (!tp_.on()) return dx;
  return nn::activation_zeros(ctx, {rows, dx.dim(1)}, dtype_of<T>());  // [N, C]
}

template <typename T>
void ColumnParallelInput<T>::finish_backward(nn::Context& ctx, Tensor& target, Tensor& dx) const {
  if (!tp_.on()) return;  // the layers accumulated into dx itself
  if (!tp_.split_sequence()) {
    CopyToRegion::backward(*tp_.group, target);
    k::residual_forward<T>(dx, dx, target);
    return;
  }
  Tensor local = nn::activation(ctx, dx.shape(), dtype_of<T>());  // [N/P, C]
  GatherFromSequence::backward(*tp_.group, target, local);
  k::residual_forward<T>(dx, dx, local);
}

void cut_parameter(nn::Parameter& p, const TensorParallel& tp, int dim, int blocks) {
  if (!tp.on()) return;
  KIRI_CHECK_KIND(kInternal, p.offset < 0 && !p.value.defined(), p.name,
                  ": tensor parallelism is applied before the parameters are bound");
  KIRI_CHECK_KIND(kInternal, p.tp.dim < 0, p.name, ": tensor parallelism is applied once");
  const int parts = tp.size();
  KIRI_CHECK(dim >= 0 && dim < static_cast<int>(p.shape.rank()), p.name, ": no dimension ", dim,
             " to cut");
  KIRI_CHECK_KIND(kConfig, p.shape[dim] % (int64_t{parts} * blocks) == 0, p.name, ": ",
                  p.shape[dim], " (", blocks, " blocks) does not split over parallel.tp = ", parts);
  p.full = p.shape;
  p.shape[dim] /= parts;
  p.tp = nn::TpSplit{dim, parts, tp.rank(), blocks};
}

void cut_parameter_rows(nn::Parameter& p, int64_t rows, const nn::TpSplit& cut) {
  if (cut.dim < 0) return;
  KIRI_CHECK_KIND(kInternal, p.offset < 0 && !p.value.defined(), p.name,
                  ": tensor parallelism is applied before the parameters are bound");
  KIRI_CHECK_KIND(kInternal, p.tp.dim < 0, p.name, ": tensor parallelism is applied once");
  p.full = p.shape;
  p.shape[0] = rows;
  p.tp = cut;
}

template <typename T>
ColumnParallelLinear<T>::ColumnParallelLinear(const std::string& name, int64_t in, int64_t out,
                                              double init_std, int blocks, nn::LinearLayout layout)
    : nn::Module(name), blocks_(blocks), layout_(layout) {
  const bool conv = layout == nn::LinearLayout::kConv1D;
  // element_runs cuts the rows of an [out, in] matrix in one piece per rank.
  KIRI_CHECK(conv || blocks == 1, name, ": an [out, in] weight is cut in one block");
  weight_ = &add_parameter("weight", nn::linear_weight_shape(layout, in, out), true,
                           {nn::InitKind::kNormal, init_std});
  if (conv) bias_ = &add_parameter("bias", {out}, false, {nn::InitKind::kZeros});
}

template <typename T>
void ColumnParallelLinear<T>::apply_tp(const TensorParallel& tp) {
  const int p = tp.size();
  KIRI_CHECK_KIND(kInternal, !tp.on() || weight_->tp.dim < 0, weight_->name,
                  ": tensor parallelism is applied once");
  const int64_t out = weight_->shape[1 - nn::linear_input_dim(layout_)];
  KIRI_CHECK_KIND(kConfig, out % (int64_t{p} * blocks_) == 0, name(), ": ", out,
                  " output columns (", blocks_, " blocks) do not split over parallel.tp = ", p);
  cut_parameter(*weight_, tp, 1 - nn::linear_input_dim(layout_), blocks_);
  if (bias_) cut_parameter(*bias_, tp, 0, blocks_);
}

template <typename T>
Tensor ColumnParallelLinear<T>::forward(nn::Context& ctx, const Tensor& x_region) {
  Tensor y = nn::activation(ctx, {x_region.dim(0), cols()}, dtype_of<T>());  // [N, out/P]
  nn::linear_apply<T>(y, x_region, weight_->value, bias_ ? bias_->value : Tensor(), layout_);
  return y;
}

template <typename T>
int64_t ColumnParallelLinear<T>::cols() const {
  return weight_->shape[1 - nn::linear_input_dim(layout_)];
}

template <typename T>
void ColumnParallelLinear<T>::backward(nn::Context& ctx, const Tensor& dy, const Tensor& x_region,
                                       Tensor& dx_partial) {
  nn::linear_grads<T>(ctx, dx_partial, *weight_, bias_, dy, x_region, layout_);
}

template <typename T>
Tensor ColumnParallelLinear<T>::gelu_bias_backward(nn::Context& ctx, Tensor dg, Tensor h) {
  KIRI_CHECK_KIND(kInternal, bias_ != nullptr, name(), ": the fused GELU backward needs a bias");
  Tensor dh =
      nn::activation(ctx, h.shape(), nn::gemm_input_dtype<T>(weight_->value));  // [N, out/P]
  Tensor db = nn::detail::grad_target<T>(ctx, bias_->grad);                     // [out/P]
  k::gelu_backward_bias<T>(dh, db, h, dg);                                      // dh overwritten
  nn::detail::accumulate_grad<T>(bias_->grad, db);
  return dh;
}

template <typename T>
void ColumnParallelLinear<T>::backward_gemms(nn::Context& ctx, const Tensor& dy,
                                             const Tensor& x_region, Tensor& dx_partial) {
  nn::linear_grads<T>(ctx, dx_partial, *weight_, nullptr, dy, x_region, layout_);
}

template <typename T>
RowParallelLinear<T>::RowParallelLinear(const std::string& name, int64_t in, int64_t out,
                                        double init_std, nn::LinearLayout layout)
    : nn::Module(name), layout_(layout) {
  weight_ = &add_parameter("weight", nn::linear_weight_shape(layout, in, out), true,
                           {nn::InitKind::kNormal, init_std});
  if (layout == nn::LinearLayout::kConv1D)
    bias_ = &add_parameter("bias", {out}, false, {nn::InitKind::kZeros});
}

template <typename T>
void RowParallelLinear<T>::apply_tp(const TensorParallel& tp) {
  const int p = tp.size();
  KIRI_CHECK_KIND(kInternal, !tp.on() || weight_->tp.dim < 0, weight_->name,
                  ": tensor parallelism is applied once");
  const int64_t in = weight_->shape[nn::linear_input_dim(layout_)];
  KIRI_CHECK_KIND(kConfig, in % p == 0, name(), ": ", in,
                  " input rows do not split over parallel.tp = ", p);
  cut_parameter(*weight_, tp, nn::linear_input_dim(layout_));
  tp_ = tp;
}

template <typename T>
Tensor RowParallelLinear<T>::forward(nn::Context& ctx, const Tensor& x) {
  const Tensor xin = nn::gemm_input<T>(ctx, x, weight_->value);  // [N, in/P]
  if (ctx.training && !recompute_input_) x_.put(ctx) = xin;
  const int64_t out = weight_->shape[1 - nn::linear_input_dim(layout_)];
  Tensor y = nn::activation(ctx, {x.dim(0), out}, dtype_of<T>());  // [N, out]
  // With more than one rank the partial products are summed first, the whole bias added after.
  const Tensor bias = bias_ && !tp_.on() ? bias_->value : Tensor();
  nn::linear_apply<T>(y, xin, weight_->value, bias, layout_);
  if (!tp_.on()) return y;
  if (tp_.split_sequence()) {
    Tensor local = nn::activation(ctx, {tp_.local_rows(y.dim(0)), out}, dtype_of<T>());
    ReduceScatterToSequence::forward(*tp_.group, y, local);  // [N/P, out]
    y = local;
  } else {
    ReduceFromRegion::forward(*tp_.group, y);
  }
  if (!bias_) return y;
  const Tensor b = nn::detail::compute_copy<T>(ctx, bias_->value);  // [out]
  const int64_t n = y.dim(0);
  T* yd = y.data<T>();
  const T* bd = b.data<T>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < out; ++j) yd[r * out + j] += bd[j];
  return y;
}

template <typename T>
void RowParallelLinear<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx,
                                    const Tensor& x_again) {
  KIRI_CHECK(recompute_input_ == x_again.defined(), "RowParallelLinear: backward ",
             x_again.defined() ? "given" : "not given", " its input, recompute ",
             recompute_input_ ? "on" : "off");
  const Tensor x = recompute_input_ ? nn::gemm_input<T>(ctx, x_again, weight_->value)
                                    : x_.take(ctx, "RowParallelLinear");
  if (!tp_.split_sequence()) {
    nn::linear_grads<T>(ctx, dx, *weight_, bias_, dy, x, layout_);
    return;
  }
  Tensor full = nn::activation(ctx, {x.dim(0), dy.dim(1)}, dtype_of<T>());  // [N, out]
  ReduceScatterToSequence::backward(*tp_.group, dy, full);
  nn::linear_grads<T>(ctx, dx, *weight_, bias_, full, x, layout_);
}

SequenceParallelGrads::SequenceParallelGrads(const TensorParallel& tp,
                                             std::vector<nn::Parameter*> params, DType dtype)
    : tp_(tp), dtype_(dtype), params_(std::move(params)) {
  KIRI_CHECK(!tp_.split_sequence() || dtype_ == DType::kF32,
             "sequence parallelism sums the norms' gradients in F32, not ", dtype_name(dtype_));
  for (const nn::Parameter* p : params_) numel_ += p->numel();
}

void SequenceParallelGrads::run(nn::Context& ctx, const std::function<void()>& backward) const {
  if (!tp_.split_sequence() || params_.empty()) {
    backward();
    return;
  }
  Tensor sum = Tensor::zeros({numel_}, dtype_, Category::kBuffers, ctx.allocator);  // [params]
  std::vector<Tensor> grads;  // the parameters' own gradients, back in place after backward
  int64_t at = 0;
  for (nn::Parameter* p : params_) {
    grads.push_back(p->grad);
    p->grad = sum.flat_range(at, p->numel()).view(p->shape);
    at += p->numel();
  }
  struct Restore {
    const std::vector<nn::Parameter*>& params;
    std::vector<Tensor>& grads;
    ~Restore() {
      for (size_t i = 0; i < params.size(); ++i) params[i]->grad = grads[i];
    }
  };
  {
    const Restore restore{params_, grads};
    backward();
  }
  CopyToRegion::backward(*tp_.group, sum);
  at = 0;
  for (nn::Parameter* p : params_) {
    k::add_into(p->grad, sum.flat_range(at, p->numel()));
    at += p->numel();
  }
}

template class ColumnParallelInput<float>;
template class ColumnParallelInput<double>;
template class ColumnParallelLinear<float>;
template class ColumnParallelLinear<double>;
template class RowParallelLinear<float>;
template class RowParallelLinear<double>;

}  // namespace kiri::parallel::tp
