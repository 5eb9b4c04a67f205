#include "kiri/model/gpt.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kiri/kernels/ops.h"

namespace kiri::model {

namespace k = kiri::kernels;

namespace {

// GPT-2 scales the residual projections' init by 1/sqrt(2 n_layer); Llama (as
// transformers' LlamaPreTrainedModel) draws every matrix with initializer_range.
constexpr double kInitStd = 0.02;

// The untied LM head: its own module, so that it follows the final norm in the
// model's parameter order (the order of the flat buffers: forward order).
class LmHead final : public nn::Module {
 public:
  explicit LmHead(const Shape& shape) : nn::Module("lm_head") {
    weight = &add_parameter("weight", shape, true, {nn::InitKind::kNormal, kInitStd});
  }
  nn::Parameter* weight;
};

}  // namespace

template <typename T>
Block<T>::Block(int index, const GPTConfig& cfg, std::shared_ptr<const nn::RopeTable> rope)
    : nn::Module((cfg.llama() ? "model.layers." : "transformer.h.") + std::to_string(index)) {
  const std::string& n = name();
  if (cfg.llama()) {
    norm_1_ =
        std::make_unique<nn::RmsNorm<T>>(n + ".input_layernorm", cfg.n_embd, cfg.rms_norm_eps);
    attn_ = std::make_unique<LlamaAttention<T>>(n + ".self_attn", cfg.n_embd, cfg.n_head,
                                                cfg.kv_heads(), kInitStd, std::move(rope));
    norm_2_ = std::make_unique<nn::RmsNorm<T>>(n + ".post_attention_layernorm", cfg.n_embd,
                                               cfg.rms_norm_eps);
    mlp_ = std::make_unique<SwiGluMlp<T>>(n + ".mlp", cfg.n_embd, cfg.mlp_width(), kInitStd);
  } else {
    const double proj_std = kInitStd / std::sqrt(2.0 * cfg.n_layer);
    norm_1_ = std::make_unique<nn::LayerNorm<T>>(n + ".ln_1", cfg.n_embd);
    attn_ = std::make_unique<CausalSelfAttention<T>>(n + ".attn", cfg.n_embd, cfg.n_head, kInitStd,
                                                     proj_std);
    norm_2_ = std::make_unique<nn::LayerNorm<T>>(n + ".ln_2", cfg.n_embd);
    mlp_ = std::make_unique<Mlp<T>>(n + ".mlp", cfg.n_embd, kInitStd, proj_std);
  }
  add_child(*norm_1_);
  add_child(*attn_);
  add_child(*norm_2_);
  add_child(*mlp_);
}

template <typename T>
void Block<T>::apply_tp(const parallel::tp::TensorParallel& tp) {
  dynamic_cast<BlockLayer<T>&>(*attn_).apply_tp(tp);
  dynamic_cast<BlockLayer<T>&>(*mlp_).apply_tp(tp);
  std::vector<nn::Parameter*> norms = norm_1_->parameters();
  for (nn::Parameter* p : norm_2_->parameters()) norms.push_back(p);
  norm_grads_ = parallel::tp::SequenceParallelGrads(tp, std::move(norms), dtype_of<T>());
}

template <typename T>
void Block<T>::set_selective_recompute(const SelectiveRecompute& r) {
  dynamic_cast<BlockLayer<T>&>(*attn_).set_recompute(
      r, [this](nn::Context& ctx) { return norm_1_->recompute_output(ctx); });
  dynamic_cast<BlockLayer<T>&>(*mlp_).set_recompute(
      r, [this](nn::Context& ctx) { return norm_2_->recompute_output(ctx); });
}

template <typename T>
Tensor Block<T>::forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
  if (!checkpointed_ || !ctx.training) return forward_impl(ctx, x, batch, seq);
  // Checkpointed: run without saving anything for backward (training off),
  // keep the input, and recompute in backward.
  ctx.training = false;
  Tensor y = forward_impl(ctx, x, batch, seq);
  ctx.training = true;
  checkpoint_.put(ctx) = {x, batch, seq};
  return y;
}

template <typename T>
Tensor Block<T>::forward_impl(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
  Tensor a = attn_->forward(ctx, norm_1_->forward(ctx, x), batch, seq);  // [N, C]
  // x1 = x + a and norm_2(x1) in one visit of each row.
  Tensor x1 = nn::activation(ctx, x.shape(), dtype_of<T>());                // [N, C]
  Tensor m = mlp_->forward(ctx, norm_2_->forward_residual(ctx, x, a, x1));  // [N, C]
  Tensor y = nn::activation(ctx, x.shape(), dtype_of<T>());                 // [N, C]
  k::residual_forward<T>(y, x1, m);
  return y;
}

template <typename T>
void Block<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx,
                        const std::function<void()>& mlp_ready) {
  norm_grads_.run(ctx, [&] { backward_impl(ctx, dy, dx, mlp_ready); });
}

template <typename T>
std::vector<nn::Parameter*> Block<T>::parameters_but_mlp() {
  const std::vector<nn::Parameter*> mlp = mlp_parameters();
  std::vector<nn::Parameter*> out;
  for (nn::Parameter* p : parameters())
    if (std::find(mlp.begin(), mlp.end(), p) == mlp.end()) out.push_back(p);
  return out;
}

template <typename T>
void Block<T>::backward_impl(nn::Context& ctx, const Tensor& dy, Tensor& dx,
                             const std::function<void()>& mlp_ready) {
  if (checkpointed_ && checkpoint_.has(ctx)) {  // recompute the activations (same ops, same values)
    const Checkpoint c = checkpoint_.take(ctx, "Block");
    forward_impl(ctx, c.input, c.batch, c.seq);
  }
  // y = x1 + mlp(norm_2(x1)):  dx1 = dy + norm_2'(mlp'(dy)), written by norm_2's backward
  Tensor dx1 = nn::activation(ctx, dy.shape(), dtype_of<T>());       // [N, C]
  Tensor dh = nn::activation_zeros(ctx, dy.shape(), dtype_of<T>());  // [N, C]
  mlp_->backward(ctx, dy, dh);
  if (mlp_ready) mlp_ready();
  norm_2_->backward_residual(ctx, dh, dy, Tensor(), dx1);
  // x1 = x + attn(norm_1(x)):  dx += norm_1'(attn'(dx1)), then dx += dx1, in one pass
  dh.zero_();
  attn_->backward(ctx, dx1, dh);
  norm_1_->backward_residual(ctx, dh, dx, dx1, dx);
}

template <typename T>
GPT<T>::GPT(const GPTConfig& cfg, GPTPart part)
    : nn::Module(""),
      cfg_(cfg),
      part_(part),
      embedding_(tp_, 0),
      vocab_head_(tp_, 0, cfg.vocab_size) {
  cfg.validate();
  if (part_.end_block < 0) part_.end_block = cfg.n_layer;
  KIRI_CHECK_KIND(kConfig,
                  0 <= part_.first_block && part_.first_block <= part_.end_block &&
                      part_.end_block <= cfg.n_layer,
                  "a model part takes blocks [", part_.first_block, ", ", part_.end_block,
                  ") of model.n_layer = ", cfg.n_layer);
  // The token table and an untied head: [V, C] (apply_tp cuts them by vocabulary rows).
  const Shape table{cfg.vocab_size, cfg.n_embd};
  if (part_.first || (part_.last && tied()))
    wte_ =
        &add_parameter(cfg.token_embedding_name(), table, true, {nn::InitKind::kNormal, kInitStd});
  if (part_.first && !cfg.llama())
    wpe_ = &add_parameter("transformer.wpe.weight", {cfg.block_size, cfg.n_embd}, true,
                          {nn::InitKind::kNormal, kInitStd});
  if (cfg.llama() && part_.first_block < part_.end_block) {
    kernels::RopeParams rp;
    rp.theta = cfg.rope_theta;
    rp.llama3 = cfg.rope_scaling.type == RopeScaling::Type::kLlama3;
    rp.factor = cfg.rope_scaling.factor;
    rp.low_freq_factor = cfg.rope_scaling.low_freq_factor;
    rp.high_freq_factor = cfg.rope_scaling.high_freq_factor;
    rp.original_max_position_embeddings = cfg.rope_scaling.original_max_position_embeddings;
    rope_ = std::make_shared<nn::RopeTable>(cfg.block_size, cfg.head_dim(), rp, dtype_of<T>());
  }
  for (int i = part_.first_block; i < part_.end_block; ++i) {
    blocks_.push_back(std::make_unique<Block<T>>(i, cfg, rope_));
    add_child(*blocks_.back());
  }
  if (part_.last) {
    if (cfg.llama())
      norm_f_ = std::make_unique<nn::RmsNorm<T>>("model.norm", cfg.n_embd, cfg.rms_norm_eps);
    else
      norm_f_ = std::make_unique<nn::LayerNorm<T>>("transformer.ln_f", cfg.n_embd);
    add_child(*norm_f_);
    if (!tied()) {
      auto head = std::make_unique<LmHead>(table);
      lm_head_ = head->weight;
      head_module_ = std::move(head);
      add_child(*head_module_);
    }
  }
}

template <typename T>
void GPT<T>::apply_tp(const parallel::tp::TensorParallel& tp) {
  tp_ = {tp.on() ? tp.group : nullptr, tp.sequence_parallel};
  cfg_.validate_tensor_parallel(tp_.size(), tp_.sequence_parallel);
  // Both vocabulary tables: rows [start, start + V/P) of the vocabulary padded to a multiple
  // of P.
  const parallel::tp::VocabRows vocab = parallel::tp::vocab_rows(tp_, cfg_.vocab_size);
  embedding_ = parallel::tp::VocabParallelEmbedding<T>(tp_, vocab.start);
  vocab_head_ = parallel::tp::VocabParallelHead<T>(tp_, vocab.start, cfg_.vocab_size);
  if (wte_) parallel::tp::cut_parameter_rows(*wte_, vocab.rows, vocab.cut);
  for (auto& block : blocks_) block->apply_tp(tp_);
  if (norm_f_)
    norm_f_grads_ = parallel::tp::SequenceParallelGrads(tp_, norm_f_->parameters(), dtype_of<T>());
  if (lm_head_) parallel::tp::cut_parameter_rows(*lm_head_, vocab.rows, vocab.cut);
}

template <typename T>
std::vector<nn::Parameter*> GPT<T>::embedding_parameters() const {
  std::vector<nn::Parameter*> out{wte_};
  if (wpe_) out.push_back(wpe_);
  return out;
}

template <typename T>
std::vector<std::vector<nn::Parameter*>> GPT<T>::parameter_groups() {
  std::vector<std::vector<nn::Parameter*>> groups(1);
  if (part_.first) groups[0] = embedding_parameters();
  for (auto& block : blocks_) groups.push_back(block->parameters());
  groups.emplace_back();
  if (part_.last) {
    groups.back() = norm_f_->parameters();
    if (!tied())
      groups.back().push_back(lm_head_);
    else if (!part_.first)
      groups.back().push_back(wte_);
  }
  return groups;
}

template <typename T>
void GPT<T>::set_activation_checkpointing(int every_k) {
  KIRI_CHECK_KIND(kConfig, every_k >= 0,
                  "activation checkpointing every k blocks needs k >= 0, got ", every_k);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int global = part_.first_block + static_cast<int>(i);
    blocks_[i]->set_checkpointed(every_k > 0 && global % every_k == 0);
  }
}

template <typename T>
void GPT<T>::set_selective_recompute(const SelectiveRecompute& r) {
  for (auto& b : blocks_) b->set_selective_recompute(r);
}

template <typename T>
double GPT<T>::loss_forward(nn::Context& ctx, const Tensor& x, const Tensor& targets,
                            double loss_weight) {
  // The final norm, the LM head and the fused softmax cross-entropy. The head
  // is in group 0 when tied (wte, in the first part), else in the final group.
  const int last = num_groups() - 1, hg = head_group();
  call(group_hooks_.before_forward, last);
  Tensor xf = norm_f_->forward(ctx, x);  // [N, C] (sequence parallel: [N/P, C])
  if (hg != last) call(group_hooks_.after_forward, last);
  xf = vocab_head_.every_row(ctx, xf);  // the LM head and the loss take every row: [N, C]
  const int64_t n = xf.dim(0);
  State st;
  const DType head_dtype = head().value.dtype();  // before the hook (ZeRO-3 releases the value)
  Tensor logits = vocab_head_.logits(ctx, xf, head().value, ctx.training ? &st.xf : nullptr);
  call(group_hooks_.after_forward, hg);
  Tensor losses = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  Tensor lse = nn::activation(ctx, {n}, dtype_of<T>());     // [N]
  Tensor flat_targets = targets.view({n});
  if (ctx.training && vocab_head_.one_pass_loss()) {
    // The loss's gradient now, while each row of the logits is in cache (backward only runs the
    // GEMMs): dloss is the loss weight already.
    Tensor dloss = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
    dloss.fill_(loss_weight);
    st.dlogits = vocab_head_.loss_forward_backward(ctx, losses, lse, std::move(logits),
                                                   flat_targets, dloss, head_dtype);
  } else {
    vocab_head_.loss_forward(ctx, losses, lse, logits, flat_targets);
  }
  const double sum = k::sum_in_order<T>(losses);  // ignored targets have loss 0
  if (ctx.training) {
    st.targets = flat_targets;
    if (!st.dlogits.defined()) {
      st.logits = logits;
      st.lse = lse;
    }
    st.loss_weight = loss_weight;
    saved_.put(ctx) = std::move(st);
  }
  return sum;
}

template <typename T>
Tensor GPT<T>::forward_part(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                            const Tensor& input, double loss_weight, double* loss_sum) {
  KIRI_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::kI32, "tokens must be [B, T] I32, got ",
             tokens.shape().str());
  const int64_t b = tokens.dim(0), t = tokens.dim(1), c = cfg_.n_embd;
  KIRI_CHECK(t <= cfg_.block_size, "sequence length ", t, " exceeds model.block_size ",
             cfg_.block_size);
  const int64_t rows = local_rows(b * t);  // of the residual stream on this rank
  Tensor x = input;
  if (part_.first) {
    call(group_hooks_.before_forward, 0);
    x = embedding_.forward(ctx, tokens, wte_->value,
                           wpe_ ? wpe_->value : Tensor());  // [N or N/P, C]
    if (!tied()) call(group_hooks_.after_forward, 0);       // the head does not come back to wte
  } else {
    KIRI_CHECK(x.defined() && x.shape() == Shape({rows, c}),
               "a model part after the first takes its input [", rows, ", ", c, "]");
  }
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int group = static_cast<int>(i) + 1;
    call(group_hooks_.before_forward, group);
    x = blocks_[i]->forward(ctx, x, b, t);
    call(group_hooks_.after_forward, group);
  }
  if (ctx.training) {
    State& st = saved_.put(ctx);
    st.tokens = tokens;
    st.loss_weight = loss_weight;
  }
  if (!part_.last) {
    if (part_.first && tied()) call(group_hooks_.after_forward, 0);
    return x;
  }
  KIRI_CHECK(targets.shape() == tokens.shape() && targets.dtype() == DType::kI32,
             "targets must be I32 of the tokens' shape ", tokens.shape().str(), ", got ",
             targets.shape().str());
  Tensor saved_tokens = ctx.training ? saved_.take(ctx, "GPT").tokens : Tensor();
  const double sum = loss_forward(ctx, x, targets, loss_weight);
  if (ctx.training) saved_.put(ctx).tokens = saved_tokens;
  if (loss_sum) *loss_sum += sum;
  return Tensor();
}

template <typename T>
double GPT<T>::forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                       double loss_weight) {
  KIRI_CHECK(whole(), "forward() runs the whole model; a part runs forward_part()");
  double sum = 0;
  forward_part(ctx, tokens, targets, Tensor(), loss_weight, &sum);
  return sum;
}

template <typename T>
void GPT<T>::backward(nn::Context& ctx) {
  KIRI_CHECK(whole(), "backward() runs the whole model; a part runs backward_part()");
  backward_part(ctx, Tensor());
}

template <typename T>
Tensor GPT<T>::head_backward(nn::Context& ctx, State& st) {
  const int64_t n = st.targets.numel(), c = cfg_.n_embd;
  const int last = num_groups() - 1, hg = head_group();
  call(group_hooks_.before_backward, hg);
  if (!st.dlogits.defined()) {  // tensor parallel: the loss's backward is still to run
    Tensor dloss = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
    dloss.fill_(st.loss_weight);
    vocab_head_.loss_backward(st.logits, st.lse, st.targets, dloss);  // logits -> dlogits
    st.dlogits = std::move(st.logits);
  }
  Tensor dxf = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
  st.lse = Tensor();
  vocab_head_.logits_backward(ctx, std::move(st.dlogits), st.xf, head(), dxf);
  st.logits = st.dlogits = st.xf = Tensor();
  dxf = vocab_head_.input_grad(ctx, std::move(dxf));  // [N, C] or [N/P, C]
  if (hook_) {
    if (!tied()) hook_({lm_head_});
    // The tied head's copy of wte is complete in a last part that is not the
    // first; with the token rows sent to a sink, so is the whole model's wte
    // (untied: its dense part has nothing more to come).
    if (part_.first ? static_cast<bool>(token_sink_) : tied()) hook_({wte_});
  }
  Tensor dx = nn::activation_zeros(ctx, dxf.shape(), dtype_of<T>());  // [N, C] or [N/P, C]
  if (hg != last) call(group_hooks_.before_backward, last);
  norm_f_grads_.run(ctx, [&] { norm_f_->backward(ctx, dxf, dx); });
  call(group_hooks_.after_backward, last);
  if (hook_) hook_(norm_f_->parameters());
  return dx;
}

template <typename T>
Tensor GPT<T>::backward_part(nn::Context& ctx, const Tensor& dout) {
  State st = saved_.take(ctx, "GPT");
  const int64_t b = st.tokens.dim(0), t = st.tokens.dim(1), n = b * t, c = cfg_.n_embd;
  const int64_t rows = local_rows(n);  // of the residual stream on this rank
  Tensor dx;
  if (part_.last) {
    dx = head_backward(ctx, st);
  } else {
    KIRI_CHECK(dout.defined() && dout.shape() == Shape({rows, c}),
               "a model part before the last takes the gradient of its output [", rows, ", ", c,
               "]");
    dx = dout;
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    const int group = static_cast<int>(i) + 1;
    call(group_hooks_.before_backward, group);
    Tensor dprev = nn::activation_zeros(ctx, {rows, c}, dtype_of<T>());  // [N, C] or [N/P, C]
    std::function<void()> mlp_ready;
    if (hook_) mlp_ready = [&] { hook_(blocks_[i]->mlp_parameters()); };
    blocks_[i]->backward(ctx, dx, dprev, mlp_ready);
    dx = dprev;
    call(group_hooks_.after_backward, group);
    if (hook_) hook_(blocks_[i]->parameters_but_mlp());
  }
  if (!part_.first) return dx;
  dx = embedding_.every_row_grad(ctx, dx, n);  // [N, C]
  if (!part_.last || head_group() != 0) call(group_hooks_.before_backward, 0);
  if (wpe_) {
    Tensor dx3 = dx.view({b, t, c});
    k::position_embedding_backward<T>(wpe_->grad, dx3);
  }
  if (token_sink_) {
    token_sink_(st.tokens.view({n}), dx);
    if (hook_ && wpe_) hook_({wpe_});
  } else {
    add_token_embedding_grad(st.tokens.view({n}), dx);
    if (hook_) hook_(embedding_parameters());
  }
  call(group_hooks_.after_backward, 0);
  return Tensor();
}

template <typename T>
void GPT<T>::add_token_embedding_grad(const Tensor& tokens, const Tensor& dx) {
  embedding_.token_backward(wte_->grad, dx, tokens);
}

template <typename T>
Tensor GPT<T>::next_token_logits(nn::Context& ctx, const Tensor& tokens) {
  KIRI_CHECK(whole() && !tp_.on(), "sampling runs the whole model on one rank");
  KIRI_CHECK(tokens.rank() == 2 && tokens.dim(0) == 1, "sampling takes tokens [1, T], got ",
             tokens.shape().str());
  const bool training = ctx.training;
  ctx.training = false;
  const int64_t t = tokens.dim(1), c = cfg_.n_embd;
  const int last = num_groups() - 1, hg = head_group();
  call(group_hooks_.before_forward, 0);
  Tensor x = embedding_.forward(ctx, tokens, wte_->value, wpe_ ? wpe_->value : Tensor());
  if (hg != 0) call(group_hooks_.after_forward, 0);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    call(group_hooks_.before_forward, static_cast<int>(i) + 1);
    x = blocks_[i]->forward(ctx, x, 1, t);
    call(group_hooks_.after_forward, static_cast<int>(i) + 1);
  }
  call(group_hooks_.before_forward, last);
  Tensor xf = norm_f_->forward(ctx, x);
  if (hg != last) call(group_hooks_.after_forward, last);
  Tensor logits =
      vocab_head_.logits(ctx, xf.flat_range((t - 1) * c, c).view({1, c}), head().value, nullptr);
  call(group_hooks_.after_forward, hg);
  ctx.training = training;
  return logits.view({cfg_.vocab_size});
}

template class Block<float>;
template class Block<double>;
template class GPT<float>;
template class GPT<double>;

}  // namespace kiri::model
