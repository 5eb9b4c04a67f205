#pragma once
// The layers' math, without communication: each a forward/backward pair over [N, C] row blocks
// (N = B*T). T is the compute scalar: float to train, double for the finite-difference gradient
// checks. The tensor-parallel linear layers that cut these over ranks, and the attention and MLP
// blocks built from them, live above (parallel/tp/layers.h, model/); nn never communicates.
//
// forward() saves what backward() needs (as views that keep the activation
// alive); backward(dout, dinp) accumulates into dinp and into the
// parameters' gradients, then releases the saved activations.
#include <type_traits>

#include "kiri/nn/module.h"

namespace kiri::nn {

// How a linear layer holds its weight: Hugging Face's Conv1D, [in, out] with a
// bias (GPT-2's), or torch's nn.Linear without a bias, [out, in] (Llama's
// projections, as LlamaForCausalLM's state dict holds them).
enum class LinearLayout { kConv1D, kOutInNoBias };

// The weight's shape for `in` inputs and `out` outputs in a layout, and which of
// its dimensions holds the inputs.
Shape linear_weight_shape(LinearLayout layout, int64_t in, int64_t out);
int linear_input_dim(LinearLayout layout);

// x as a linear layer's GEMM takes it: x itself, or under mixed precision (a 16-bit
// weight) its copy in the weight's dtype [N, in] (an activation: what backward keeps,
// half the bytes of x). A copy several layers share is converted once.
template <typename T>
Tensor gemm_input(Context& ctx, const Tensor& x, const Tensor& weight);
// The dtype gemm_input() gives for this weight: its own under mixed precision, else T's. A
// kernel that writes a GEMM's input directly in it (GELU's output) saves the conversion.
template <typename T>
DType gemm_input_dtype(const Tensor& weight) {
  return std::is_same_v<T, float> && weight.dtype() != dtype_of<T>() ? weight.dtype()
                                                                     : dtype_of<T>();
}

// y[N, out] = x[N, in] @ weight (+ bias[out], Conv1D), or x @ weight^T (nn.Linear's
// layout); x from gemm_input(). bias may be undefined.
template <typename T>
void linear_apply(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor& bias,
                  LinearLayout layout);
// dx[N, in] += dy @ weight^T (dx may be undefined); dweight += x^T dy; dbias += sum_rows(dy)
// (bias may be null). x: what linear_apply took.
template <typename T>
void linear_grads(Context& ctx, Tensor& dx, Parameter& weight, Parameter* bias, const Tensor& dy,
                  const Tensor& x, LinearLayout layout);

// What a transformer block composes: a layer over rows [N, C] (a norm, an MLP)
// and one over the rows of B sequences of T (attention), each a forward and
// backward pair; backward accumulates into dx.
template <typename T>
class RowLayer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  virtual void backward(Context& ctx, const Tensor& dy, Tensor& dx) = 0;
  // The output of ctx's training forward computed again from what that forward saved for
  // backward (bitwise: the same op on the same values), before backward() takes it: a norm's,
  // whose output selective recomputation (`layernorm`) does not keep.
  virtual Tensor recompute_output(Context& ctx) {
    KIRI_CHECK(false, this->name(), ": cannot recompute its output (micro-batch ", ctx.micro_batch,
               ")");
    return Tensor();
  }
};
template <typename T>
class SequenceLayer : public Module {
 public:
  using Module::Module;
  // x: [B, T, C] viewed as [B*T, C]; batch and seq given explicitly.
  virtual Tensor forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) = 0;
  virtual void backward(Context& ctx, const Tensor& dy, Tensor& dx) = 0;
};

// A norm over rows (LayerNorm, RMSNorm) that can also take its input as the sum of the residual
// stream and a branch, as a block's second norm does (x1 = x + attn(...); norm_2(x1)): the add
// and the norm in one visit of each row, and in backward the norm's input gradient added to the
// residual stream's in the same pass (kernels' residual_*norm ops; bitwise the unfused ones).
template <typename T>
class NormLayer : public RowLayer<T> {
 public:
  using RowLayer<T>::RowLayer;
  // sum [N,C] = a + b; returns the norm of sum and saves what forward(sum) would save.
  virtual Tensor forward_residual(Context& ctx, const Tensor& a, const Tensor& b, Tensor& sum) = 0;
  // dx [N,C] = dbase + the input gradient for dy, then + dskip when defined. dx may be dbase:
  // backward(dy, dx), then dx += dskip; otherwise dx is written, not read.
  virtual void backward_residual(Context& ctx, const Tensor& dy, const Tensor& dbase,
                                 const Tensor& dskip, Tensor& dx) = 0;
};

// y[N,C] = (x - mean) * rstd * weight + bias, over the last dimension.
template <typename T>
class LayerNorm final : public NormLayer<T> {
 public:
  LayerNorm(const std::string& name, int64_t channels);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;
  Tensor recompute_output(Context& ctx) override;
  Tensor forward_residual(Context& ctx, const Tensor& a, const Tensor& b, Tensor& sum) override;
  void backward_residual(Context& ctx, const Tensor& dy, const Tensor& dbase, const Tensor& dskip,
                         Tensor& dx) override;

 private:
  Parameter* weight_;
  Parameter* bias_;
  struct State {
    Tensor x, mean, rstd;  // [N,C], [N], [N]
  };
  Saved<State> saved_;
};

// The attention core of causal multi-head self-attention: per head h of this rank's H,
//   att_h = softmax(q_h k_h^T / sqrt(hs) + causal mask) v_h,
// from qkv [B, T, 3C'] (q | k | v, each [B, T, C'] = H heads of hs). The kernel never holds
// the T x T probabilities: forward keeps its output and the rows' log-sum-exp lse [B, H, T],
// and backward recomputes the probabilities from q, k and lse (as FlashAttention does).
// With recompute on (selective recomputation's `core_attn`) forward keeps only qkv and
// backward first runs the forward again for att and lse (the same kernel on the same qkv:
// bitwise the same values).
template <typename T>
class CausalAttentionCore {
 public:
  explicit CausalAttentionCore(int n_head) : n_head_(n_head) {}
  void set_recompute(bool on) { recompute_ = on; }
  // qkv [B, T, 3C'] -> att [B, T, C'].
  Tensor forward(Context& ctx, const Tensor& qkv);
  // dqkv [B, T, 3C'] += the gradient for datt [B, T, C'].
  void backward(Context& ctx, const Tensor& datt, Tensor& dqkv);

 private:
  int n_head_;
  bool recompute_ = false;
  struct State {
    Tensor qkv, att, lse;  // [B,T,3C'], [B,T,C'] and [B,H,T] (recompute: qkv only)
  };
  Saved<State> saved_;
};

// A kBuffers scratch of the attention kernels for sequences of `seq`.
Tensor attention_scratch(Context& ctx, int64_t seq, DType dtype);

}  // namespace kiri::nn
