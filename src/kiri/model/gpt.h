#pragma once
// The decoder-only transformer, in two architectures (GPTConfig::arch):
//  - gpt2: token + position embedding, n_layer pre-LN blocks (attention and a
//    4x GELU MLP, each in a residual branch), a final LayerNorm, and an LM head
//    tied to the token embedding; Hugging Face GPT2LMHeadModel's names and
//    shapes (the tied lm_head.weight is not a separate parameter, as in its
//    safetensors files).
//  - llama: token embedding, n_layer pre-RMSNorm blocks (grouped-query
//    attention with rotary position embedding, a SwiGLU MLP), a final RMSNorm
//    and an LM head, tied or not (tie_word_embeddings); no biases, no position
//    table; Hugging Face LlamaForCausalLM's names and shapes.
// One class for both, so that every cut (its parameter groups and hooks) is the
// same for either. The shape (GPTConfig) is the config's (config/gpt_config.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kiri/config/gpt_config.h"
#include "kiri/model/layers.h"
#include "kiri/nn/layers.h"
#include "kiri/nn/llama_layers.h"
#include "kiri/parallel/tp/vocab_parallel.h"

namespace kiri::model {

template <typename T>
class Block : public nn::Module {
 public:
  // rope: the model's rotary table (llama), else nullptr. Built whole; apply_tp cuts it.
  Block(int index, const GPTConfig& cfg, std::shared_ptr<const nn::RopeTable> rope = nullptr);
  // Tensor parallelism (attention by heads, MLP by columns; model/layers.h), before the
  // parameters are bound; under sequence parallelism the norms' gradients are summed over tp.
  void apply_tp(const parallel::tp::TensorParallel& tp);
  // x: [B*T, C] -> [B*T, C]
  Tensor forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq);
  // dy: [B*T, C]; accumulates the gradient of the block's input into dx. mlp_ready (when
  // set) is called once the MLP's parameters have their final gradient, before the attention's
  // backward: DDP starts their buckets half a block earlier.
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx,
                const std::function<void()>& mlp_ready = {});
  // The MLP's parameters, and the block's others (the norms and the attention's).
  std::vector<nn::Parameter*> mlp_parameters() { return mlp_->parameters(); }
  std::vector<nn::Parameter*> parameters_but_mlp();
  // Activation checkpointing: a checkpointed block keeps only its input
  // during a training forward and recomputes its activations in backward.
  void set_checkpointed(bool on) { checkpointed_ = on; }
  bool checkpointed() const { return checkpointed_; }
  // Selective recomputation (model/layers.h): the attention and the MLP keep less and
  // recompute it in backward, the norms' outputs from the norms.
  void set_selective_recompute(const SelectiveRecompute& r);

 private:
  Tensor forward_impl(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq);
  void backward_impl(nn::Context& ctx, const Tensor& dy, Tensor& dx,
                     const std::function<void()>& mlp_ready);

  bool checkpointed_ = false;
  struct Checkpoint {
    Tensor input;  // [B*T, C] kept instead of the activations
    int64_t batch = 0, seq = 0;
  };
  nn::Saved<Checkpoint> checkpoint_;
  // x1 = x + attn(norm_1(x)); y = x1 + mlp(norm_2(x1)). GPT-2: ln_1, attn, ln_2,
  // mlp; Llama: input_layernorm, self_attn, post_attention_layernorm, mlp.
  std::unique_ptr<nn::NormLayer<T>> norm_1_;
  std::unique_ptr<nn::SequenceLayer<T>> attn_;
  std::unique_ptr<nn::NormLayer<T>> norm_2_;
  std::unique_ptr<nn::RowLayer<T>> mlp_;
  // Sequence parallelism: the norms see this rank's rows only; their gradients summed over tp.
  parallel::tp::SequenceParallelGrads norm_grads_;
};

// Which part of the model an object holds. Pipeline parallelism cuts the
// model into parts along the blocks; the first part has the embeddings (wte,
// wpe), the last the final norm and the LM head: tied to wte (a last part
// that is not also the first holds its own copy of wte, whose gradient the
// pipeline sums with the first part's), or its own lm_head (untied: nothing
// to sum). One process holds the whole.
struct GPTPart {
  int first_block = 0;
  int end_block = -1;  // -1: n_layer
  bool first = true;
  bool last = true;
};

template <typename T>
class GPT : public nn::Module {
 public:
  // The whole model, or one part of it: its parameters are shapes until a
  // ParameterStore binds them, so the cuts can still change them
  // (model/parallelize.h applies them).
  explicit GPT(const GPTConfig& cfg, GPTPart part = {});
  // Tensor parallelism, applied by parallelize's apply_tp before the parameters
  // are bound (kInternal after). With P > 1 ranks each block's attention and MLP
  // are split Megatron-style (model/layers.h), and the token embedding and the
  // LM head by vocabulary rows (the vocabulary padded to a multiple of P): the
  // full logits never exist on one rank. Under sequence parallelism (needs
  // P > 1) the residual stream, the norms and the stage boundaries hold this
  // rank's rows of each micro-batch only, [N/P, C]; the embedding
  // reduce-scatters into them and the final norm's output is all-gathered for
  // the LM head and the loss. kConfig naming the numbers for a layout the
  // model's shape does not split.
  void apply_tp(const parallel::tp::TensorParallel& tp);
  const GPTConfig& config() const { return cfg_; }
  const GPTPart& part() const { return part_; }
  bool whole() const { return part_.first && part_.last; }
  // The rows of the residual stream this rank holds of a micro-batch of `rows`
  // tokens: all, or rows / P under sequence parallelism (kConfig when P does
  // not divide them). A part's input and output are [local_rows(B*T), C].
  int64_t local_rows(int64_t rows) const { return tensor_parallel().local_rows(rows); }

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
  // gradient (the LM head right after it ran: the untied lm_head, or the tied
  // wte when the token rows go to a sink; then the final norm,
  // each block from the last, the embeddings), so data parallelism can start
  // their reduction while backward goes on.
  using GradReadyHook = std::function<void(const std::vector<nn::Parameter*>&)>;
  void set_grad_ready_hook(GradReadyHook hook) { hook_ = std::move(hook); }
  // When set, backward hands the token embedding's gradient rows (tokens [N]
  // I32, dx [N, C]) to the sink instead of adding them into wte's gradient:
  // data parallelism all-gathers those few MB instead of waiting for the
  // V x C gradient at the very end of backward. add_token_embedding_grad()
  // adds such rows (this rank's vocabulary rows of them).
  using TokenGradSink = std::function<void(const Tensor& tokens, const Tensor& dx)>;
  void set_token_grad_sink(TokenGradSink sink) { token_sink_ = std::move(sink); }
  void add_token_embedding_grad(const Tensor& tokens, const Tensor& dx);
  nn::Parameter& wte() { return *wte_; }
  bool has_wte() const { return wte_ != nullptr; }
  // Whether the LM head is the token embedding (always for GPT-2).
  bool tied() const { return cfg_.tie_word_embeddings; }

  // The parameters in groups, in forward order: 0 = the embeddings (wte,
  // wpe; empty in a part that is not the first), then the part's blocks,
  // then the final norm with the untied lm_head, or with the LM head's copy
  // of wte in a last part that is not the first (empty in a part that is not
  // the last). The sharding engine builds its units from whole groups.
  std::vector<std::vector<nn::Parameter*>> parameter_groups();
  int num_groups() const { return static_cast<int>(blocks_.size()) + 2; }
  // Called around each group's use, so parameter sharding can gather a
  // unit's parameters just in time and free them after. Forward: before(0),
  // (before(i), after(i)) for each block and the final group, after(0) once
  // the tied LM head has run. Backward: before(0) (the tied LM head), then the
  // final group and the blocks from the last, each (before, after), and
  // after(0) when the embeddings' gradient is complete. Untied, group 0 is
  // used only by the embedding: after(0) right after it in forward, and
  // (before(0), after(0)) at the end of backward. Sampling and evaluation call
  // the forward hooks too.
  struct GroupHooks {
    std::function<void(int group)> before_forward, after_forward, before_backward, after_backward;
  };
  void set_group_hooks(GroupHooks hooks) { group_hooks_ = std::move(hooks); }
  // Checkpoints block i's activations when every_k > 0 and i % every_k == 0
  // (every_k = 1: every block; 0: none; i counts the whole model's blocks).
  void set_activation_checkpointing(int every_k);
  // Selective recomputation of every block (model/layers.h); none by default.
  void set_selective_recompute(const SelectiveRecompute& r);

 private:
  double loss_forward(nn::Context& ctx, const Tensor& x, const Tensor& targets, double loss_weight);
  struct State;
  // The last part's backward through the loss, the LM head and the final norm:
  // returns the gradient of the last block's output [N, C].
  Tensor head_backward(nn::Context& ctx, State& st);
  void call(const std::function<void(int)>& hook, int group) {
    if (hook) hook(group);
  }

  const parallel::tp::TensorParallel& tensor_parallel() const { return tp_; }
  // The LM head's weight [V, C] (wte when tied) and the group that holds it.
  nn::Parameter& head() { return tied() ? *wte_ : *lm_head_; }
  int head_group() const { return tied() && part_.first ? 0 : num_groups() - 1; }
  std::vector<nn::Parameter*> embedding_parameters() const;  // group 0 of a first part

  GPTConfig cfg_;
  GPTPart part_;
  parallel::tp::TensorParallel tp_;  // the residual stream's rows (none until apply_tp)
  // Both ends of the vocabulary, cut by its rows over tp (parallel/tp/vocab_parallel.h).
  parallel::tp::VocabParallelEmbedding<T> embedding_;
  parallel::tp::VocabParallelHead<T> vocab_head_;
  nn::Parameter* wte_ = nullptr;               // [V, C] on the first part, and the last when tied
  nn::Parameter* wpe_ = nullptr;               // [block_size, C] on the first part (GPT-2)
  nn::Parameter* lm_head_ = nullptr;           // [V, C] on the last part when untied
  std::shared_ptr<const nn::RopeTable> rope_;  // llama
  std::vector<std::unique_ptr<Block<T>>> blocks_;
  std::unique_ptr<nn::RowLayer<T>> norm_f_;           // ln_f / model.norm, on the last part
  parallel::tp::SequenceParallelGrads norm_f_grads_;  // its gradients' sum over tp (sp)
  std::unique_ptr<nn::Module> head_module_;           // holds lm_head_ (after norm_f_ in order)
  // Saved by forward for backward, per micro-batch in flight.
  struct State {
    Tensor tokens, targets;  // [B, T], [N]
    Tensor xf, logits, lse;  // [N, C] (16-bit under mixed precision), [N, V], [N]: last part
    // The loss's gradient [N, V] where forward computed it with the loss (one rank: the one-pass
    // softmax cross-entropy; 16-bit under mixed precision), else logits and lse are kept.
    Tensor dlogits;
    double loss_weight = 0;
  };
  nn::Saved<State> saved_;
  GradReadyHook hook_;
  GroupHooks group_hooks_;
  TokenGradSink token_sink_;
};

}  // namespace kiri::model
