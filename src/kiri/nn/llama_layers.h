#pragma once
// The Llama layers' math, forward/backward pairs over [N, C] row blocks as the GPT-2
// ones (layers.h): the rotary table, RMSNorm and the grouped-query attention core. The
// attention and SwiGLU blocks, with their (tensor-parallel) projections, are model/'s
// (model/llama_layers.h).
#include <memory>

#include "kiri/kernels/ops.h"
#include "kiri/nn/layers.h"

namespace kiri::nn {

// The rotary embedding's cos and sin [P, hs/2] for positions [0, P), computed
// once per model and shared by its attention layers (a few KB, held apart from
// the training allocator's categories).
class RopeTable {
 public:
  RopeTable(int64_t positions, int64_t head_dim, const kernels::RopeParams& params, DType dtype);
  RopeTable(const RopeTable&) = delete;
  RopeTable& operator=(const RopeTable&) = delete;
  const Tensor& cos() const { return cos_; }
  const Tensor& sin() const { return sin_; }

 private:
  Allocator allocator_;
  Tensor cos_, sin_;
};

// y[N,C] = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
class RmsNorm final : public NormLayer<T> {
 public:
  RmsNorm(const std::string& name, int64_t channels, double eps);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;
  Tensor recompute_output(Context& ctx) override;
  Tensor forward_residual(Context& ctx, const Tensor& a, const Tensor& b, Tensor& sum) override;
  void backward_residual(Context& ctx, const Tensor& dy, const Tensor& dbase, const Tensor& dskip,
                         Tensor& dx) override;

 private:
  Parameter* weight_;
  double eps_;
  struct State {
    Tensor x, rstd;  // [N,C], [N]
  };
  Saved<State> saved_;
};

// The attention core of grouped-query attention: query head h of this rank's Hq attends with
// key/value head h / (Hq / Hkv),
//   att_h = softmax(q_h k_{h'}^T / sqrt(hs) + causal mask) v_{h'},
// from the rotated q [B, T, Hq*hs] and k, v [B, T, Hkv*hs]. Forward keeps its inputs, its
// output and lse [B, Hq, T] for backward, as CausalAttentionCore (and with recompute on, only
// its inputs: backward runs the forward again for att and lse).
template <typename T>
class GqaAttentionCore {
 public:
  GqaAttentionCore(int n_head, int n_kv_head) : n_head_(n_head), n_kv_head_(n_kv_head) {}
  void set_recompute(bool on) { recompute_ = on; }
  Tensor forward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v);
  // dq [B,T,Hq*hs], dk, dv [B,T,Hkv*hs] += the gradients for datt [B,T,Hq*hs].
  void backward(Context& ctx, const Tensor& datt, Tensor& dq, Tensor& dk, Tensor& dv);

 private:
  int n_head_, n_kv_head_;
  bool recompute_ = false;
  struct State {
    Tensor q, k, v, att, lse;  // [B,T,Hq*hs], [B,T,Hkv*hs] x2, [B,T,Hq*hs], [B,Hq,T]
  };
  Saved<State> saved_;
};

}  // namespace kiri::nn
