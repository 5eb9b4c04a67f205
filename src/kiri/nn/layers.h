#pragma once
// The GPT-2 layers (Llama's are in llama_layers.h), each a forward/backward pair over [N, C] row
// blocks (N = B*T). T is the compute scalar: float to train, double for the finite-difference
// gradient checks.
//
// forward() saves what backward() needs (as views that keep the activation
// alive); backward(dout, dinp) accumulates into dinp and into the
// parameters' gradients, then releases the saved activations.
#include "kiri/comm/communicator.h"
#include "kiri/nn/module.h"

namespace kiri::nn {

// Tensor parallelism of a linear layer (Megatron-LM's ColumnParallelLinear
// and RowParallelLinear), over `group`:
//  - column: W = [W_1 ... W_p] by output columns, b likewise; rank i
//    computes y_i = x W_i + b_i from the whole x (x is replicated), so
//    forward needs no communication; backward all-reduces dx = sum_i dy_i W_i^T
//    (Megatron's f: identity forward, all-reduce backward). `blocks` > 1 cuts
//    each of that many equal column blocks (q|k|v) separately, so rank i holds
//    its heads of each.
//  - row: W = [W_1; ...; W_p] by input rows; rank i holds x_i (the column
//    layer's output) and computes x_i W_i; forward all-reduces the sum and
//    then adds the whole bias (Megatron's g: all-reduce forward, identity
//    backward). Backward needs no communication.
struct TpLinear {
  enum class Mode { kNone, kColumn, kRow };
  Mode mode = Mode::kNone;
  comm::Communicator* group = nullptr;
  int blocks = 1;
};

// How a Linear holds its weight: Hugging Face's Conv1D, [in, out] with a bias
// (GPT-2's), or torch's nn.Linear without a bias, [out, in] (Llama's
// projections, as LlamaForCausalLM's state dict holds them). Column parallel
// cuts the output dimension, row parallel the input one, in either layout.
enum class LinearLayout { kConv1D, kOutInNoBias };

// y[N,out] = x[N,in] @ weight + bias[out]: weight [in,out] (kConv1D) or
// weight[out,in]^T without bias (kOutInNoBias).
template <typename T>
class Linear : public Module {
 public:
  Linear(const std::string& name, int64_t in, int64_t out, double init_std, TpLinear tp = {},
         LinearLayout layout = LinearLayout::kConv1D);
  // x: [N, in] of T, or under mixed precision already the weights' 16-bit
  // dtype (a copy several layers share, converted once).
  Tensor forward(Context& ctx, const Tensor& x);
  // Accumulates into dx. Column parallel with reduce_dx false: adds this rank's
  // partial dx without the all-reduce, so that layers reading the same x (q, k,
  // v; gate, up) sum their partials first and reduce_input_grad() once.
  void backward(Context& ctx, const Tensor& dy, Tensor& dx, bool reduce_dx = true);
  // dx += the partial input gradient summed over the group (column parallel;
  // else dx += partial).
  void reduce_input_grad(Tensor& partial, Tensor& dx) const;
  Parameter& weight() { return *weight_; }
  bool has_bias() const { return bias_ != nullptr; }
  Parameter& bias() { return *bias_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  TpLinear tp_;
  LinearLayout layout_;
  Saved<Tensor> x_;  // [N, in] saved input (16-bit under mixed precision)
};

// What a transformer block composes: a layer over rows [N, C] (a norm, an MLP)
// and one over the rows of B sequences of T (attention), each a forward and
// backward pair; backward accumulates into dx.
template <typename T>
class RowLayer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  virtual void backward(Context& ctx, const Tensor& dy, Tensor& dx) = 0;
};
template <typename T>
class SequenceLayer : public Module {
 public:
  using Module::Module;
  // x: [B, T, C] viewed as [B*T, C]; batch and seq given explicitly.
  virtual Tensor forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) = 0;
  virtual void backward(Context& ctx, const Tensor& dy, Tensor& dx) = 0;
};

// y[N,C] = (x - mean) * rstd * weight + bias, over the last dimension.
template <typename T>
class LayerNorm final : public RowLayer<T> {
 public:
  LayerNorm(const std::string& name, int64_t channels);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  Parameter* weight_;
  Parameter* bias_;
  struct State {
    Tensor x, mean, rstd;  // [N,C], [N], [N]
  };
  Saved<State> saved_;
};

// Causal multi-head self-attention: c_attn (C -> 3C), attention, c_proj (C -> C).
template <typename T>
class CausalSelfAttention final : public SequenceLayer<T> {
 public:
  // With a tensor-parallel group of p ranks: n_head / p heads per rank
  // (c_attn column parallel, c_proj row parallel).
  CausalSelfAttention(const std::string& name, int64_t channels, int n_head, double init_std,
                      double proj_init_std, comm::Communicator* tp = nullptr);
  Tensor forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  int n_head_;
  Linear<T> c_attn_, c_proj_;
  struct State {
    int64_t batch = 0, seq = 0;
    Tensor qkv, att, lse;  // [B,T,3C], [B,T,C], [B,H,T]
  };
  Saved<State> saved_;
};

// MLP: c_fc (C -> 4C), GELU, c_proj (4C -> C).
template <typename T>
class Mlp final : public RowLayer<T> {
 public:
  // With a tensor-parallel group: c_fc column parallel, c_proj row parallel.
  Mlp(const std::string& name, int64_t channels, double init_std, double proj_init_std,
      comm::Communicator* tp = nullptr);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  Linear<T> c_fc_, c_proj_;
  Saved<Tensor> h_;  // [N, 4C] pre-activation (GELU input)
};

}  // namespace kiri::nn
