#pragma once
// The Llama layers, forward/backward pairs over [N, C] row blocks as the GPT-2
// ones (layers.h): RMSNorm, grouped-query attention with rotary position
// embedding, and the SwiGLU MLP. Projections are nn.Linear-shaped ([out, in],
// no bias) under LlamaForCausalLM's names (q_proj, ..., down_proj), so that a
// state dict maps one to one.
//
// Tensor parallelism (Megatron's split): q_proj, k_proj, v_proj, gate_proj and
// up_proj are column parallel (each rank its query heads, its key/value heads,
// its columns of the MLP), o_proj and down_proj row parallel. The projections
// that read the same x sum their partial input gradients and all-reduce once.
#include <memory>

#include "kiri/kernels/cpu/ops.h"
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
class RmsNorm final : public RowLayer<T> {
 public:
  RmsNorm(const std::string& name, int64_t channels, double eps);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  Parameter* weight_;
  double eps_;
  struct State {
    Tensor x, rstd;  // [N,C], [N]
  };
  Saved<State> saved_;
};

// Causal grouped-query self-attention: q = RoPE(x Wq^T), k = RoPE(x Wk^T),
// v = x Wv^T, attention of each query head with its key/value head, o_proj.
template <typename T>
class LlamaAttention final : public SequenceLayer<T> {
 public:
  // n_head query heads and n_kv_head key/value heads of channels / n_head;
  // with a tensor-parallel group of p ranks, n_head / p and n_kv_head / p each.
  LlamaAttention(const std::string& name, int64_t channels, int n_head, int n_kv_head,
                 double init_std, std::shared_ptr<const RopeTable> rope,
                 comm::Communicator* tp = nullptr);
  Tensor forward(Context& ctx, const Tensor& x, int64_t batch, int64_t seq) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  int n_head_, n_kv_head_;  // this rank's
  std::shared_ptr<const RopeTable> rope_;
  comm::Communicator* tp_;
  Linear<T> q_proj_, k_proj_, v_proj_, o_proj_;
  struct State {
    int64_t batch = 0, seq = 0;
    Tensor q, k, v, att, lse;  // [B,T,Hq*hs] (rotated), [B,T,Hkv*hs] x2, [B,T,Hq*hs], [B,Hq,T]
  };
  Saved<State> saved_;
};

// down_proj(silu(gate_proj(x)) * up_proj(x)), intermediate width `hidden`.
template <typename T>
class SwiGluMlp final : public RowLayer<T> {
 public:
  SwiGluMlp(const std::string& name, int64_t channels, int64_t hidden, double init_std,
            comm::Communicator* tp = nullptr);
  Tensor forward(Context& ctx, const Tensor& x) override;
  void backward(Context& ctx, const Tensor& dy, Tensor& dx) override;

 private:
  comm::Communicator* tp_;
  Linear<T> gate_proj_, up_proj_, down_proj_;
  struct State {
    Tensor gate, up;  // [N, I] each: the SwiGLU's inputs
  };
  Saved<State> saved_;
};

}  // namespace kiri::nn
