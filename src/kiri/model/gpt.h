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
  // tp: the tensor-parallel group (attention by heads, MLP by columns), or nullptr.
  Block(const std::string& name, const GPTConfig& cfg, comm::Communicator* tp = nullptr);
  // x: [B*T, C] -> [B*T, C]
  Tensor forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq);
  // dy: [B*T, C]; accumulates the gradient of the block's input into dx.
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx);
  // Activation checkpointing: a checkpointed block keeps only its input
  // during a training forward and recomputes its activations in backward.
  void set_checkpointed(bool on) { checkpointed_ = on; }
  bool checkpointed() const { return checkpointed_; }

 private:
  Tensor forward_impl(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq);

  bool checkpointed_ = false;
  struct Checkpoint {
    Tensor input;  // [B*T, C] kept instead of the activations
    int64_t batch = 0, seq = 0;
  };
  nn::Saved<Checkpoint> checkpoint_;
  nn::LayerNorm<T> ln_1_;
  nn::CausalSelfAttention<T> attn_;
  nn::LayerNorm<T> ln_2_;
  nn::Mlp<T> mlp_;
};

// Which part of the model an object holds. Pipeline parallelism cuts the
// model into parts along the blocks; the first part has the embeddings (wte,
// wpe), the last the final LayerNorm and the LM head, tied to wte (a last
// part that is not also the first holds its own copy of wte, whose gradient
// the pipeline sums with the first part's). One process holds the whole.
struct GPTPart {
  int first_block = 0;
  int end_block = -1;  // -1: n_layer
  bool first = true;
  bool last = true;
};

template <typename T>
class GPT : public nn::Module {
 public:
  // tp: the tensor-parallel group, or nullptr. With p > 1 ranks, each
  // block's attention and MLP are split Megatron-style (nn::TpLinear), and
  // the token embedding and the LM head by vocabulary rows (the vocabulary
  // padded to a multiple of p): the full logits never exist on one rank.
  explicit GPT(const GPTConfig& cfg, GPTPart part = {}, comm::Communicator* tp = nullptr);
  const GPTConfig& config() const { return cfg_; }
  const GPTPart& part() const { return part_; }
  bool whole() const { return part_.first && part_.last; }

  // tokens, targets: [B, T] I32 (a target < 0 is ignored). Returns the SUM of
  // the per-token losses; backward() uses d(loss)/d(token loss) = loss_weight,
  // so loss_weight = 1 / (tokens in the global batch) makes the gradient that
  // of the mean over the global batch, across micro-batches and ranks.
  // The whole model only; parts use forward_part / backward_part.
  double forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets, double loss_weight);
  void backward(nn::Context& ctx);
  // One part's forward of one micro-batch (ctx.micro_batch): the first part
  // embeds tokens, the others take `input` [B*T, C], the previous part's
  // output. The last part adds the sum of the token losses to *loss_sum and
  // returns an undefined tensor; the others return their output [B*T, C].
  // tokens and targets [B, T] are given to every part (for their shape).
  Tensor forward_part(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                      const Tensor& input, double loss_weight, double* loss_sum);
  // Its backward: dout = the gradient of the output (undefined for the last
  // part); returns the gradient of the input (undefined for the first part).
  Tensor backward_part(nn::Context& ctx, const Tensor& dout);
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
  bool has_wte() const { return wte_ != nullptr; }

  // The parameters in groups, in forward order: 0 = the embeddings (wte,
  // wpe; empty in a part that is not the first), then the part's blocks,
  // then the final LayerNorm (with the LM head's copy of wte in a last part
  // that is not the first; empty in a part that is not the last). The
  // sharding engine builds its units from whole groups.
  std::vector<std::vector<nn::Parameter*>> parameter_groups();
  int num_groups() const { return static_cast<int>(blocks_.size()) + 2; }
  // Called around each group's use, so parameter sharding can gather a
  // unit's parameters just in time and free them after. Forward: before(0),
  // (before(i), after(i)) for each block and ln_f, after(0) once the tied LM
  // head has run. Backward: before(0) (the LM head), then ln_f and the blocks
  // from the last, each (before, after), and after(0) when the embeddings'
  // gradient is complete. Sampling and evaluation call the forward hooks too.
  struct GroupHooks {
    std::function<void(int group)> before_forward, after_forward, before_backward, after_backward;
  };
  void set_group_hooks(GroupHooks hooks) { group_hooks_ = std::move(hooks); }
  // Checkpoints block i's activations when every_k > 0 and i % every_k == 0
  // (every_k = 1: every block; 0: none; i counts the whole model's blocks).
  void set_activation_checkpointing(int every_k);

 private:
  // logits [N, V] = xf [N, C] @ wte^T; the LM head's 16-bit path returns its
  // 16-bit copy of xf in *saved_xf (else xf itself) for backward.
  Tensor lm_head_forward(nn::Context& ctx, const Tensor& xf, Tensor* saved_xf);
  // Takes dlogits by value so that the 16-bit path can free the fp32 one early.
  void lm_head_backward(nn::Context& ctx, Tensor dlogits, const Tensor& xf, Tensor& dxf);
  double loss_forward(nn::Context& ctx, const Tensor& x, const Tensor& targets, double loss_weight);
  void call(const std::function<void(int)>& hook, int group) {
    if (hook) hook(group);
  }

  int tp_size() const { return tp_ ? tp_->size() : 1; }
  void embed(nn::Context& ctx, Tensor& x, const Tensor& tokens);  // x [B,T,C] = wte[tokens] + wpe
  void embed_backward(const Tensor& dx, const Tensor& tokens);    // the token-embedding part

  GPTConfig cfg_;
  GPTPart part_;
  comm::Communicator* tp_ = nullptr;
  int64_t vocab_start_ = 0;       // this rank's first row of the (padded) vocabulary
  nn::Parameter* wte_ = nullptr;  // [V, C] on the first and the last part
  nn::Parameter* wpe_ = nullptr;  // [block_size, C] on the first part
  std::vector<std::unique_ptr<Block<T>>> blocks_;
  std::unique_ptr<nn::LayerNorm<T>> ln_f_;  // on the last part
  // Saved by forward for backward, per micro-batch in flight.
  struct State {
    Tensor tokens, targets;  // [B, T], [N]
    Tensor xf, logits, lse;  // [N, C] (16-bit under mixed precision), [N, V], [N]: last part
    double loss_weight = 0;
  };
  nn::Saved<State> saved_;
  GradReadyHook hook_;
  GroupHooks group_hooks_;
  bool defer_embedding_grad_ = false;
  Tensor deferred_tokens_, deferred_dx_;  // [N] I32, [N, C]
};

}  // namespace kiri::model
