#pragma once
// The GPT-2 layers, each a forward/backward pair over [N, C] row blocks
// (N = B*T). T is the compute scalar: float to train, double for the
// finite-difference gradient checks.
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

// y[N,out] = x[N,in] @ weight[in,out] + bias[out]  (Hugging Face Conv1D layout)
template <typename T>
class Linear : public Module {
 public:
  Linear(const std::string& name, int64_t in, int64_t out, double init_std, TpLinear tp = {});
  Tensor forward(Context& ctx, const Tensor& x);
  void backward(Context& ctx, const Tensor& dy, Tensor& dx);
  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }

 private:
  Parameter* weight_;
  Parameter* bias_;
  TpLinear tp_;
  Saved<Tensor> x_;  // [N, in] saved input (16-bit under mixed precision)
};

// y[N,C] = (x - mean) * rstd * weight + bias, over the last dimension.
template <typename T>
class LayerNorm : public Module {
 public:
  LayerNorm(const std::string& name, int64_t channels);
  Tensor forward(Context& ctx, const Tensor& x);
  void backward(Context& ctx, const Tensor& dy, Tensor& dx);

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
class CausalSelfAttention : public Module {
 public:
  // With a tensor-parallel group of p ranks: n_head / p heads per rank
  // (c_attn column parallel, c_proj row parallel).
  CausalSelfAttention(const std::string& name, int64_t channels, int n_head, double init_std,
                      double proj_init_std, comm::Communicator* tp = nullptr);
  // x: [B, T, C] viewed as [B*T, C]; batch and seq given explicitly.
  Tensor forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq);
  void backward(Context& ctx, const Tensor& dy, Tensor& dx);

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
class Mlp : public Module {
 public:
  // With a tensor-parallel group: c_fc column parallel, c_proj row parallel.
  Mlp(const std::string& name, int64_t channels, double init_std, double proj_init_std,
      comm::Communicator* tp = nullptr);
  Tensor forward(Context& ctx, const Tensor& x);
  void backward(Context& ctx, const Tensor& dy, Tensor& dx);

 private:
  Linear<T> c_fc_, c_proj_;
  Saved<Tensor> h_;  // [N, 4C] pre-activation (GELU input)
};

}  // namespace kiri::nn
