#include "kiri/model/gpt.h"

#include <cmath>
#include <string>
#include <type_traits>

#include "kiri/kernels/ops.h"
#include "kiri/parallel/tp/cross_entropy.h"
#include "kiri/parallel/tp/embedding.h"
#include "kiri/parallel/tp/mappings.h"
#include "kiri/parallel/tp/utils.h"

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
  LmHead(const Shape& shape, const Shape& full, nn::TpSplit tp) : nn::Module("lm_head") {
    weight = &add_parameter("weight", shape, true, {nn::InitKind::kNormal, kInitStd}, full, tp);
  }
  nn::Parameter* weight;
};

}  // namespace

template <typename T>
Block<T>::Block(int index, const GPTConfig& cfg, const parallel::tp::TensorParallel& tp,
                std::shared_ptr<const nn::RopeTable> rope)
    : nn::Module((cfg.llama() ? "model.layers." : "transformer.h.") + std::to_string(index)) {
  const std::string& n = name();
  if (cfg.llama()) {
    norm_1_ =
        std::make_unique<nn::RmsNorm<T>>(n + ".input_layernorm", cfg.n_embd, cfg.rms_norm_eps);
    attn_ = std::make_unique<LlamaAttention<T>>(n + ".self_attn", cfg.n_embd, cfg.n_head,
                                                cfg.kv_heads(), kInitStd, std::move(rope), tp);
    norm_2_ = std::make_unique<nn::RmsNorm<T>>(n + ".post_attention_layernorm", cfg.n_embd,
                                               cfg.rms_norm_eps);
    mlp_ = std::make_unique<SwiGluMlp<T>>(n + ".mlp", cfg.n_embd, cfg.mlp_width(), kInitStd, tp);
  } else {
    const double proj_std = kInitStd / std::sqrt(2.0 * cfg.n_layer);
    norm_1_ = std::make_unique<nn::LayerNorm<T>>(n + ".ln_1", cfg.n_embd);
    attn_ = std::make_unique<CausalSelfAttention<T>>(n + ".attn", cfg.n_embd, cfg.n_head, kInitStd,
                                                     proj_std, tp);
    norm_2_ = std::make_unique<nn::LayerNorm<T>>(n + ".ln_2", cfg.n_embd);
    mlp_ = std::make_unique<Mlp<T>>(n + ".mlp", cfg.n_embd, kInitStd, proj_std, tp);
  }
  add_child(*norm_1_);
  add_child(*attn_);
  add_child(*norm_2_);
  add_child(*mlp_);
  std::vector<nn::Parameter*> norms = norm_1_->parameters();
  for (nn::Parameter* p : norm_2_->parameters()) norms.push_back(p);
  norm_grads_ = parallel::tp::SequenceParallelGrads(tp, std::move(norms), dtype_of<T>());
}

template <typename T>
void Block<T>::set_selective_recompute(const SelectiveRecompute& r) {
  dynamic_cast<SelectiveLayer<T>&>(*attn_).set_recompute(
      r, [this](nn::Context& ctx) { return norm_1_->recompute_output(ctx); });
  dynamic_cast<SelectiveLayer<T>&>(*mlp_).set_recompute(
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
  Tensor x1 = nn::activation(ctx, x.shape(), dtype_of<T>());             // [N, C]
  k::residual_forward<T>(x1, x, a);
  Tensor m = mlp_->forward(ctx, norm_2_->forward(ctx, x1));  // [N, C]
  Tensor y = nn::activation(ctx, x.shape(), dtype_of<T>());  // [N, C]
  k::residual_forward<T>(y, x1, m);
  return y;
}

template <typename T>
void Block<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  norm_grads_.run(ctx, [&] { backward_impl(ctx, dy, dx); });
}

template <typename T>
void Block<T>::backward_impl(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  if (checkpointed_ && checkpoint_.has(ctx)) {  // recompute the activations (same ops, same values)
    const Checkpoint c = checkpoint_.take(ctx, "Block");
    forward_impl(ctx, c.input, c.batch, c.seq);
  }
  // y = x1 + mlp(norm_2(x1)):  dx1 = dy + norm_2'(mlp'(dy))
  Tensor dx1 = nn::activation(ctx, dy.shape(), dtype_of<T>());  // [N, C]
  dx1.copy_from(dy);
  Tensor dh = nn::activation_zeros(ctx, dy.shape(), dtype_of<T>());  // [N, C]
  mlp_->backward(ctx, dy, dh);
  norm_2_->backward(ctx, dh, dx1);
  // x1 = x + attn(norm_1(x)):  dx += dx1 + norm_1'(attn'(dx1))
  dh.zero_();
  attn_->backward(ctx, dx1, dh);
  norm_1_->backward(ctx, dh, dx);
  k::residual_forward<T>(dx, dx, dx1);
}

template <typename T>
GPT<T>::GPT(const GPTConfig& cfg, GPTPart part, comm::Communicator* tp, bool sequence_parallel)
    : nn::Module(""),
      cfg_(cfg),
      part_(part),
      tp_(tp && tp->size() > 1 ? tp : nullptr),
      sequence_parallel_(sequence_parallel) {
  cfg.validate();
  cfg.validate_tensor_parallel(tp_size(), sequence_parallel);
  if (part_.end_block < 0) part_.end_block = cfg.n_layer;
  KIRI_CHECK_KIND(kConfig,
                  0 <= part_.first_block && part_.first_block <= part_.end_block &&
                      part_.end_block <= cfg.n_layer,
                  "a model part takes blocks [", part_.first_block, ", ", part_.end_block,
                  ") of model.n_layer = ", cfg.n_layer);
  // The token table and an untied head: [V, C], vocab parallel under tp (rows
  // [start, start + V/p) of the vocabulary padded to a multiple of p).
  const int p = tp_size();
  const int64_t rows = tp_ ? parallel::tp::pad_vocab(cfg.vocab_size, p) / p : cfg.vocab_size;
  vocab_start_ = tp_ ? rows * tp_->rank() : 0;
  const Shape local{rows, cfg.n_embd}, full{cfg.vocab_size, cfg.n_embd};
  const nn::TpSplit cut = tp_ ? nn::TpSplit{0, p, tp_->rank(), 1} : nn::TpSplit{};
  if (part_.first || (part_.last && tied()))
    wte_ = &add_parameter(cfg.token_embedding_name(), local, true,
                          {nn::InitKind::kNormal, kInitStd}, full, cut);
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
    blocks_.push_back(std::make_unique<Block<T>>(i, cfg, tensor_parallel(), rope_));
    add_child(*blocks_.back());
  }
  if (part_.last) {
    if (cfg.llama())
      norm_f_ = std::make_unique<nn::RmsNorm<T>>("model.norm", cfg.n_embd, cfg.rms_norm_eps);
    else
      norm_f_ = std::make_unique<nn::LayerNorm<T>>("transformer.ln_f", cfg.n_embd);
    add_child(*norm_f_);
    norm_f_grads_ = parallel::tp::SequenceParallelGrads(tensor_parallel(), norm_f_->parameters(),
                                                        dtype_of<T>());
    if (!tied()) {
      auto head = std::make_unique<LmHead>(local, full, cut);
      lm_head_ = head->weight;
      head_module_ = std::move(head);
      add_child(*head_module_);
    }
  }
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
Tensor GPT<T>::lm_head_forward(nn::Context& ctx, const Tensor& xf, Tensor* saved_xf) {
  // v: this rank's rows of the vocabulary (all of it without tensor parallelism).
  const Tensor& w = head().value;  // [V, C]
  const int64_t n = xf.dim(0), c = cfg_.n_embd, v = w.dim(0);
  Tensor logits = nn::activation(ctx, {n, v}, dtype_of<T>());  // [N, V]
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = w.dtype();
    if (pd != DType::kF32) {  // 16-bit parameters: a 16-bit GEMM on a 16-bit copy of xf
      Tensor xl = nn::activation(ctx, {n, c}, pd);  // [N, C]
      k::convert(xl, xf);
      k::gemm_lowp(pd, false, true, n, v, c, 1.0f, xl.raw(), c, w.raw(), c, 0.0f, logits.raw(),
                   DType::kF32, v);
      if (saved_xf) *saved_xf = xl;
      return logits;
    }
  }
  k::gemm<T>(false, true, n, v, c, T(1), xf.data<T>(), c, w.data<T>(), c, T(0), logits.data<T>(),
             v);
  if (saved_xf) *saved_xf = xf;
  return logits;
}

template <typename T>
void GPT<T>::lm_head_backward(nn::Context& ctx, Tensor dlogits, const Tensor& xf, Tensor& dxf) {
  // logits = xf @ head^T: dxf += dlogits @ head; dhead += dlogits^T @ xf
  const int64_t n = dlogits.dim(0), v = dlogits.dim(1), c = cfg_.n_embd;
  nn::Parameter& w = head();
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = xf.dtype();
    if (pd != DType::kF32) {
      Tensor dl = nn::activation(ctx, {n, v}, pd);  // [N, V] 16-bit copy of dlogits
      k::convert(dl, dlogits);
      dlogits = Tensor();  // the fp32 [N, V] is the largest buffer: free it before the GEMMs
      k::gemm_lowp(pd, false, false, n, c, v, 1.0f, dl.raw(), v, w.value.raw(), c, 1.0f, dxf.raw(),
                   DType::kF32, c);
      ctx.progress();
      k::gemm_lowp(pd, true, false, v, c, n, 1.0f, dl.raw(), v, xf.raw(), c, 1.0f, w.grad.raw(), pd,
                   c);
      return;
    }
  }
  k::gemm<T>(false, false, n, c, v, T(1), dlogits.data<T>(), v, w.value.data<T>(), c, T(1),
             dxf.data<T>(), c);
  ctx.progress();
  k::gemm<T>(true, false, v, c, n, T(1), dlogits.data<T>(), v, xf.data<T>(), c, T(1),
             w.grad.data<T>(), c);
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
  if (sequence_parallel_) {  // the LM head and the loss take every row
    Tensor full = nn::activation(ctx, {xf.dim(0) * tp_size(), xf.dim(1)}, dtype_of<T>());
    parallel::tp::GatherFromSequence::forward(*tp_, xf, full);  // [N, C]
    xf = full;
  }
  const int64_t n = xf.dim(0);
  State st;
  Tensor logits = lm_head_forward(ctx, xf, ctx.training ? &st.xf : nullptr);  // [N, V]
  call(group_hooks_.after_forward, hg);
  Tensor losses = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  Tensor lse = nn::activation(ctx, {n}, dtype_of<T>());     // [N]
  Tensor flat_targets = targets.view({n});
  if constexpr (std::is_same_v<T, float>) {
    if (tp_)  // the vocab-parallel cross-entropy: 3 all-reduces of [N], no full logits
      parallel::tp::vocab_parallel_cross_entropy_forward(
          *tp_, losses, lse, logits, flat_targets, vocab_start_, cfg_.vocab_size, ctx.allocator);
  }
  if (!tp_) k::softmax_xent_forward<T>(losses, lse, logits, flat_targets);
  const double sum = k::sum_in_order<T>(losses);  // ignored targets have loss 0
  if (ctx.training) {
    st.targets = flat_targets;
    st.logits = logits;
    st.lse = lse;
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
    x = embed(ctx, tokens);                            // [N, C] or [N/P, C]
    if (!tied()) call(group_hooks_.after_forward, 0);  // the head does not come back to wte
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
  Tensor dloss = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  dloss.fill_(st.loss_weight);
  if constexpr (std::is_same_v<T, float>) {
    if (tp_)
      parallel::tp::vocab_parallel_cross_entropy_backward(st.logits, st.lse, st.targets, dloss,
                                                          vocab_start_, cfg_.vocab_size);
  }
  if (!tp_) k::softmax_xent_backward<T>(st.logits, st.lse, st.targets, dloss);
  Tensor dxf = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
  st.lse = Tensor();
  lm_head_backward(ctx, std::move(st.logits), st.xf, dxf);  // logits held dlogits [N, V]
  st.logits = st.xf = Tensor();
  // Each rank's dxf sums over its vocabulary rows only (xf was replicated:
  // Megatron's f backward).
  // Sequence parallel: reduce-scattered instead, to this rank's rows (the
  // all-gather's backward).
  if (sequence_parallel_) {
    Tensor local = nn::activation(ctx, {local_rows(n), c}, dtype_of<T>());  // [N/P, C]
    parallel::tp::GatherFromSequence::backward(*tp_, dxf, local);
    dxf = local;
  } else if (tp_) {
    parallel::tp::CopyToRegion::backward(*tp_, dxf);
  }
  if (hook_) {
    if (!tied()) hook_({lm_head_});
    // The tied head's copy of wte is complete in a last part that is not the
    // first; with the token rows deferred, so is the whole model's wte (untied:
    // its dense part has nothing more to come).
    if (part_.first ? defer_embedding_grad_ : tied()) hook_({wte_});
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
    blocks_[i]->backward(ctx, dx, dprev);
    dx = dprev;
    call(group_hooks_.after_backward, group);
    if (hook_) hook_(blocks_[i]->parameters());
  }
  if (!part_.first) return dx;
  if (sequence_parallel_) {  // the embedding's reduce-scatter, backward: every row on every rank
    Tensor full = nn::activation(ctx, {n, c}, dtype_of<T>());  // [N, C]
    parallel::tp::ReduceScatterToSequence::backward(*tp_, dx, full);
    dx = full;
  }
  if (!part_.last || head_group() != 0) call(group_hooks_.before_backward, 0);
  if (wpe_) {
    Tensor dx3 = dx.view({b, t, c});
    k::position_embedding_backward<T>(wpe_->grad, dx3);
  }
  if (defer_embedding_grad_) {
    deferred_tokens_ = st.tokens.view({n});
    deferred_dx_ = dx;
    if (hook_ && wpe_) hook_({wpe_});
  } else {
    embed_backward(dx, st.tokens.view({n}));
    if (hook_) hook_(embedding_parameters());
  }
  call(group_hooks_.after_backward, 0);
  return Tensor();
}

template <typename T>
Tensor GPT<T>::embed(nn::Context& ctx, const Tensor& tokens) {
  const int64_t b = tokens.dim(0), t = tokens.dim(1), c = cfg_.n_embd;
  Tensor x = nn::activation(ctx, {b, t, c}, dtype_of<T>());  // [B,T,C]
  if constexpr (std::is_same_v<T, float>) {
    if (tp_) {  // each rank looks up its rows, one collective sums them; then + wpe
      Tensor rows = x.view({b * t, c});  // [N, C]
      int64_t first = 0;                 // the micro-batch's row that rows[0] is
      if (sequence_parallel_) {
        rows = nn::activation(ctx, {local_rows(b * t), c}, DType::kF32);  // [N/P, C]
        parallel::tp::vocab_parallel_embedding_forward(*tp_, x, tokens, wte_->value, vocab_start_,
                                                       rows);
        first = rows.dim(0) * tp_->rank();
      } else {
        parallel::tp::vocab_parallel_embedding_forward(*tp_, x, tokens, wte_->value, vocab_start_);
      }
      if (wpe_) add_positions(ctx, rows, first, t);
      return rows;
    }
  }
  if (wpe_)
    k::embedding_forward<T>(x, tokens, wte_->value, wpe_->value);
  else
    k::token_embedding_forward<T>(x, tokens, wte_->value);
  return x.view({b * t, c});
}

template <typename T>
void GPT<T>::add_positions(nn::Context& ctx, Tensor& rows, int64_t first, int64_t seq) {
  Tensor wpe = wpe_->value;  // [block_size, C]
  if (wpe.dtype() != DType::kF32) {
    wpe = Tensor::empty(wpe_->value.shape(), DType::kF32, Category::kBuffers, ctx.allocator);
    k::convert(wpe, wpe_->value);
  }
  k::add_position_rows(rows, wpe, first, seq);
}

template <typename T>
void GPT<T>::embed_backward(const Tensor& dx, const Tensor& tokens) {
  if constexpr (std::is_same_v<T, float>) {
    if (tp_) {
      Tensor g = wte_->grad;
      parallel::tp::vocab_parallel_embedding_backward(g, dx, tokens, vocab_start_);
      return;
    }
  }
  add_token_embedding_grad(tokens, dx);
}

template <typename T>
void GPT<T>::add_token_embedding_grad(const Tensor& tokens, const Tensor& dx) {
  k::token_embedding_backward<T>(wte_->grad, dx, tokens);
}

template <typename T>
Tensor GPT<T>::next_token_logits(nn::Context& ctx, const Tensor& tokens) {
  KIRI_CHECK(whole() && !tp_, "sampling runs the whole model on one rank");
  KIRI_CHECK(tokens.rank() == 2 && tokens.dim(0) == 1, "sampling takes tokens [1, T], got ",
             tokens.shape().str());
  const bool training = ctx.training;
  ctx.training = false;
  const int64_t t = tokens.dim(1), c = cfg_.n_embd;
  const int last = num_groups() - 1, hg = head_group();
  call(group_hooks_.before_forward, 0);
  Tensor x = embed(ctx, tokens);  // [T, C]
  if (hg != 0) call(group_hooks_.after_forward, 0);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    call(group_hooks_.before_forward, static_cast<int>(i) + 1);
    x = blocks_[i]->forward(ctx, x, 1, t);
    call(group_hooks_.after_forward, static_cast<int>(i) + 1);
  }
  call(group_hooks_.before_forward, last);
  Tensor xf = norm_f_->forward(ctx, x);
  if (hg != last) call(group_hooks_.after_forward, last);
  Tensor logits = lm_head_forward(ctx, xf.flat_range((t - 1) * c, c).view({1, c}), nullptr);
  call(group_hooks_.after_forward, hg);
  ctx.training = training;
  return logits.view({cfg_.vocab_size});
}

template class Block<float>;
template class Block<double>;
template class GPT<float>;
template class GPT<double>;

}  // namespace kiri::model
