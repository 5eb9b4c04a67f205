#pragma once
// Internal to the layers (nn's and the tensor-parallel ones above it): how a float layer computes
// with 16-bit parameters (mixed precision). Its GEMMs take 16-bit inputs and accumulate in fp32;
// its other ops read fp32 copies of the parameters and add their gradients into the 16-bit ones
// through fp32 scratch.
#include <type_traits>

#include "kiri/kernels/ops.h"
#include "kiri/nn/module.h"

namespace kiri::nn::detail {

// Whether a float layer's parameter is 16-bit (mixed precision).
template <typename T>
bool lowp(const Tensor& param) {
  return std::is_same_v<T, float> && param.dtype() != dtype_of<T>();
}

// The parameter as T (a converted copy, category buffers, when it is 16-bit).
template <typename T>
Tensor compute_copy(Context& ctx, const Tensor& param) {
  if (!lowp<T>(param)) return param;
  Tensor t = Tensor::empty(param.shape(), dtype_of<T>(), Category::kBuffers, ctx.allocator);
  kernels::convert(t, param);
  return t;
}

// Where backward should accumulate a parameter's gradient: the gradient itself,
// or a zeroed T scratch that accumulate_grad() then adds into the 16-bit gradient.
template <typename T>
Tensor grad_target(Context& ctx, const Tensor& grad) {
  if (!lowp<T>(grad)) return grad;
  return Tensor::zeros(grad.shape(), dtype_of<T>(), Category::kBuffers, ctx.allocator);
}
template <typename T>
void accumulate_grad(Tensor& grad, const Tensor& target) {
  if (lowp<T>(grad)) kernels::add_into(grad, target);
}

}  // namespace kiri::nn::detail
