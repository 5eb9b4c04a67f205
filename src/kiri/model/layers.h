#pragma once
// The attention and MLP layers of a transformer block, for both architectures, built the
// Megatron way from the tensor-parallel layers (parallel/tp/layers.h) around nn's math: each
// is one column-parallel region (ColumnParallelInput, then column-parallel projections) whose
// output a row-parallel projection sums. So a block communicates only at the regions' ends:
// without sequence parallelism two all-reduces of [N, C] forward (the row layers' g) and two
// backward (the regions' f); with it an all-gather entering and a reduce-scatter leaving each
// region, both ways (and, with selective recomputation's `layernorm`, the all-gather again
// of each region's input in backward: without it the region keeps its gathered input).
//
// x and y are the residual stream's rows: [N, C], or this rank's [N/P, C] under sequence
// parallelism; batch and seq are the micro-batch's (N = batch * seq).
#include <memory>
#include <string>
#include <vector>

#include "kiri/config/layout.h"
#include "kiri/nn/llama_layers.h"
#include "kiri/parallel/tp/layers.h"

namespace kiri::model {

// The micro-batch's shape, saved by the attention layers for their backward.
struct AttentionDims {
  int64_t batch = 0, seq = 0;
};

// Selective recomputation (parallel.activation_checkpointing = selective, Megatron-core's
// --recompute-granularity selective --recompute-modules): what a block does not keep for
// backward and computes again there. The linear layers' inputs are kept otherwise.
//   core_attn  the attention core keeps only its inputs (qkv; Llama's rotated q, k and v) and
//              reruns its forward for its output and lse [B, H, T]
//   layernorm  the column-parallel regions keep no X_region [N, C]: the norm recomputes its
//              output from its own saved input (under sequence parallelism all-gathered again)
//   mlp_act    the row-parallel down projection keeps no input [N, 4C/P] (SwiGLU [N, I/P]):
//              the activation is applied again to its saved input(s)
// The modules: the one layout's (config/layout.h), which owns their names and their parser.
using SelectiveRecompute = kiri::RecomputeModules;

// An attention or MLP layer of a block, as parallelize cuts and checkpoints it after the model
// is built: apply_tp cuts it over the tp group (before the parameters are bound; on one rank it
// stays whole), and set_recompute turns selective recomputation on, where `input` gives the
// norm's output again (used with `layernorm`).
template <typename T>
class BlockLayer {
 public:
  virtual ~BlockLayer() = default;
  virtual void apply_tp(const parallel::tp::TensorParallel& tp) = 0;
  virtual void set_recompute(const SelectiveRecompute& r,
                             typename parallel::tp::ColumnParallelInput<T>::Source input) = 0;
};

// GPT-2's causal multi-head self-attention: c_attn (C -> 3C, q | k | v), the attention core,
// c_proj (C -> C). Tensor parallel over P ranks: c_attn column parallel by heads (its q, k and
// v blocks each cut: n_head / P heads per rank), c_proj row parallel.
template <typename T>
class CausalSelfAttention final : public nn::SequenceLayer<T>, public BlockLayer<T> {
 public:
  CausalSelfAttention(const std::string& name, int64_t channels, int n_head, double init_std,
                      double proj_init_std);
  Tensor forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) override;
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) override;
  void apply_tp(const parallel::tp::TensorParallel& tp) override;
  void set_recompute(const SelectiveRecompute& r,
                     typename parallel::tp::ColumnParallelInput<T>::Source input) override;

 private:
  int n_head_;  // the model's
  parallel::tp::ColumnParallelInput<T> input_;
  parallel::tp::ColumnParallelLinear<T> c_attn_;
  nn::CausalAttentionCore<T> core_;
  parallel::tp::RowParallelLinear<T> c_proj_;
  nn::Saved<AttentionDims> dims_;
};

// GPT-2's MLP: c_fc (C -> 4C, column parallel), GELU, c_proj (4C -> C, row parallel).
template <typename T>
class Mlp final : public nn::RowLayer<T>, public BlockLayer<T> {
 public:
  Mlp(const std::string& name, int64_t channels, double init_std, double proj_init_std);
  Tensor forward(nn::Context& ctx, const Tensor& x) override;
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) override;
  void apply_tp(const parallel::tp::TensorParallel& tp) override;
  void set_recompute(const SelectiveRecompute& r,
                     typename parallel::tp::ColumnParallelInput<T>::Source input) override;

 private:
  // GELU(h) [N, 4C/P] in the dtype c_proj's GEMM takes.
  Tensor gelu_output(nn::Context& ctx, const Tensor& h);

  parallel::tp::ColumnParallelInput<T> input_;
  parallel::tp::ColumnParallelLinear<T> c_fc_;
  parallel::tp::RowParallelLinear<T> c_proj_;
  bool recompute_act_ = false;
  nn::Saved<Tensor> h_;  // [N, 4C/P] pre-activation (GELU input)
};

// Llama's causal grouped-query self-attention: q = RoPE(x Wq^T), k = RoPE(x Wk^T), v = x Wv^T,
// the attention core of each query head with its key/value head, o_proj. Projections in
// nn.Linear's layout ([out, in], no bias) under LlamaForCausalLM's names. Tensor parallel:
// q_proj, k_proj and v_proj column parallel (each rank its n_head / P query heads and its
// n_kv_head / P key/value heads, one region: their partial input gradients summed and
// reduced once), o_proj row parallel.
template <typename T>
class LlamaAttention final : public nn::SequenceLayer<T>, public BlockLayer<T> {
 public:
  LlamaAttention(const std::string& name, int64_t channels, int n_head, int n_kv_head,
                 double init_std, std::shared_ptr<const nn::RopeTable> rope);
  Tensor forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) override;
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) override;
  void apply_tp(const parallel::tp::TensorParallel& tp) override;
  void set_recompute(const SelectiveRecompute& r,
                     typename parallel::tp::ColumnParallelInput<T>::Source input) override;

 private:
  int n_head_, n_kv_head_;  // the model's
  std::shared_ptr<const nn::RopeTable> rope_;
  parallel::tp::ColumnParallelInput<T> input_;
  parallel::tp::ColumnParallelLinear<T> q_proj_, k_proj_, v_proj_;
  nn::GqaAttentionCore<T> core_;
  parallel::tp::RowParallelLinear<T> o_proj_;
  nn::Saved<AttentionDims> dims_;
};

// Llama's SwiGLU MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), intermediate width `hidden`;
// gate_proj and up_proj column parallel (one region), down_proj row parallel.
template <typename T>
class SwiGluMlp final : public nn::RowLayer<T>, public BlockLayer<T> {
 public:
  SwiGluMlp(const std::string& name, int64_t channels, int64_t hidden, double init_std);
  Tensor forward(nn::Context& ctx, const Tensor& x) override;
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) override;
  void apply_tp(const parallel::tp::TensorParallel& tp) override;
  void set_recompute(const SelectiveRecompute& r,
                     typename parallel::tp::ColumnParallelInput<T>::Source input) override;

 private:
  parallel::tp::ColumnParallelInput<T> input_;
  parallel::tp::ColumnParallelLinear<T> gate_proj_, up_proj_;
  parallel::tp::RowParallelLinear<T> down_proj_;
  bool recompute_act_ = false;
  struct State {
    Tensor gate, up;  // [N, I/P] each: the SwiGLU's inputs
  };
  nn::Saved<State> saved_;
};

}  // namespace kiri::model
