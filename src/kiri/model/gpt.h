#pragma once
// GPT-2: token + position embedding, n_layer pre-LN blocks (attention and a
// 4x GELU MLP, each in a residual branch), a final LayerNorm, and an LM head
// tied to the token embedding. Parameter names and shapes are those of
// Hugging Face's GPT2LMHeadModel (the tied lm_head.weight is not a separate
// parameter, as in its safetensors files).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiri/nn/layers.h"

namespace kiri::model {

struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 256;
  int vocab_size = 50257;
  int block_size = 256;  // longest sequence (rows of wpe)

  // Raises kConfig naming the numbers when the shape is impossible.
  void validate() const;
  int64_t num_parameters() const;
  // Model FLOPs per token for forward+backward at sequence length seq:
  // 6 * (parameters in matmuls, incl. the LM head) + 12 * n_layer * n_embd * seq (attention).
  double flops_per_token(int64_t seq) const;
};

template <typename T>
class Block : public nn::Module {
 public:
  Block(const std::string& name, const GPTConfig& cfg);
  // x: [B*T, C] -> [B*T, C]
  Tensor forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq);
  // dy: [B*T, C]; accumulates the gradient of the block's input into dx.
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx);

 private:
  nn::LayerNorm<T> ln_1_;
  nn::CausalSelfAttention<T> attn_;
  nn::LayerNorm<T> ln_2_;
  nn::Mlp<T> mlp_;
};

template <typename T>
class GPT : public nn::Module {
 public:
  explicit GPT(const GPTConfig& cfg);
  const GPTConfig& config() const { return cfg_; }

  // tokens, targets: [B, T] I32 (a target < 0 is ignored). Returns the SUM of
  // the per-token losses; backward() uses d(loss)/d(token loss) = loss_weight,
  // so loss_weight = 1 / (tokens in the global batch) makes the gradient that
  // of the mean over the global batch, across micro-batches and ranks.
  double forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets, double loss_weight);
  void backward(nn::Context& ctx);
  // Logits of the last position for tokens [1, T] (no state kept): [V].
  Tensor next_token_logits(nn::Context& ctx, const Tensor& tokens);

  // Called during backward each time a group of parameters has its final
  // gradient (the tied wte right after the LM head when the token-embedding
  // gradient is deferred, then ln_f, each block from the last, wpe), so data
  // parallelism can start their reduction while backward goes on.
  using GradReadyHook = std::function<void(const std::vector<nn::Parameter*>&)>;
  void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }
  // When set, backward leaves the token-embedding part of wte's gradient out
  // and keeps its rows (tokens [N], dx [N, C]): a few MB that data
  // parallelism all-gathers instead of waiting for the V x C gradient at the
  // very end of backward. add_token_embedding_grad() adds such rows.
  void set_defer_token_embedding_grad(bool defer) { defer_embedding_grad_ = defer; }
  const Tensor& deferred_tokens() const { return deferred_tokens_; }
  const Tensor& deferred_dx() const { return deferred_dx_; }
  void clear_deferred() { deferred_tokens_ = deferred_dx_ = Tensor(); }
  void add_token_embedding_grad(const Tensor& tokens, const Tensor& dx);
  nn::Parameter& wte() { return *wte_; }

 private:
  Tensor trunk_forward(nn::Context& ctx, const Tensor& tokens);  // -> ln_f output [B*T, C]

  GPTConfig cfg_;
  nn::Parameter* wte_;  // [V, C]
  nn::Parameter* wpe_;  // [block_size, C]
  std::vector<std::unique_ptr<Block<T>>> blocks_;
  nn::LayerNorm<T> ln_f_;
  // Saved by forward for backward.
  Tensor tokens_, targets_, xf_, logits_, lse_;  // [B,T], [B,T], [N,C], [N,V], [N]
  double loss_weight_ = 0;
  GradReadyHook hook_;
  bool defer_embedding_grad_ = false;
  Tensor deferred_tokens_, deferred_dx_;  // [N] I32, [N, C]
};

}  // namespace kiri::model
