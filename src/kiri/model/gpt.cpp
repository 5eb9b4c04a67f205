#include "kiri/model/gpt.h"

#include <cmath>
#include <type_traits>

#include "kiri/kernels/cpu/ops.h"
#include "kiri/parallel/tp/cross_entropy.h"
#include "kiri/parallel/tp/embedding.h"
#include "kiri/parallel/tp/utils.h"

namespace kiri::model {

namespace k = kiri::kernels;

template <typename T>
Block<T>::Block(const std::string& name, const GPTConfig& cfg, comm::Communicator* tp)
    : nn::Module(name),
      ln_1_(child_name("ln_1"), cfg.n_embd),
      attn_(child_name("attn"), cfg.n_embd, cfg.n_head, 0.02, 0.02 / std::sqrt(2.0 * cfg.n_layer),
            tp),
      ln_2_(child_name("ln_2"), cfg.n_embd),
      mlp_(child_name("mlp"), cfg.n_embd, 0.02, 0.02 / std::sqrt(2.0 * cfg.n_layer), tp) {
  add_child(ln_1_);
  add_child(attn_);
  add_child(ln_2_);
  add_child(mlp_);
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
  Tensor a = attn_.forward(ctx, ln_1_.forward(ctx, x), batch, seq);  // [N, C]
  Tensor x1 = nn::activation(ctx, x.shape(), dtype_of<T>());         // [N, C]
  k::residual_forward<T>(x1, x, a);
  Tensor m = mlp_.forward(ctx, ln_2_.forward(ctx, x1));      // [N, C]
  Tensor y = nn::activation(ctx, x.shape(), dtype_of<T>());  // [N, C]
  k::residual_forward<T>(y, x1, m);
  return y;
}

template <typename T>
void Block<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  if (checkpointed_ && checkpoint_.has(ctx)) {  // recompute the activations (same ops, same values)
    const Checkpoint c = checkpoint_.take(ctx, "Block");
    forward_impl(ctx, c.input, c.batch, c.seq);
  }
  // y = x1 + mlp(ln_2(x1)):  dx1 = dy + ln_2'(mlp'(dy))
  Tensor dx1 = nn::activation(ctx, dy.shape(), dtype_of<T>());  // [N, C]
  dx1.copy_from(dy);
  Tensor dh = nn::activation_zeros(ctx, dy.shape(), dtype_of<T>());  // [N, C]
  mlp_.backward(ctx, dy, dh);
  ln_2_.backward(ctx, dh, dx1);
  // x1 = x + attn(ln_1(x)):  dx += dx1 + ln_1'(attn'(dx1))
  dh.zero_();
  attn_.backward(ctx, dx1, dh);
  ln_1_.backward(ctx, dh, dx);
  k::residual_forward<T>(dx, dx, dx1);
}

template <typename T>
GPT<T>::GPT(const GPTConfig& cfg, GPTPart part, comm::Communicator* tp)
    : nn::Module(""), cfg_(cfg), part_(part), tp_(tp && tp->size() > 1 ? tp : nullptr) {
  cfg.validate();
  if (part_.end_block < 0) part_.end_block = cfg.n_layer;
  KIRI_CHECK_KIND(kConfig,
                  0 <= part_.first_block && part_.first_block <= part_.end_block &&
                      part_.end_block <= cfg.n_layer,
                  "a model part takes blocks [", part_.first_block, ", ", part_.end_block,
                  ") of model.n_layer = ", cfg.n_layer);
  if ((part_.first || part_.last) && !tp_)
    wte_ = &add_parameter("transformer.wte.weight", {cfg.vocab_size, cfg.n_embd}, true,
                          {nn::InitKind::kNormal, 0.02});
  if ((part_.first || part_.last) && tp_) {  // vocab parallel: rows [start, start + V/p)
    const int p = tp_->size();
    const int64_t rows = parallel::tp::pad_vocab(cfg.vocab_size, p) / p;
    vocab_start_ = rows * tp_->rank();
    wte_ = &add_parameter("transformer.wte.weight", {rows, cfg.n_embd}, true,
                          {nn::InitKind::kNormal, 0.02}, {cfg.vocab_size, cfg.n_embd},
                          {0, p, tp_->rank(), 1});
  }
  if (part_.first)
    wpe_ = &add_parameter("transformer.wpe.weight", {cfg.block_size, cfg.n_embd}, true,
                          {nn::InitKind::kNormal, 0.02});
  for (int i = part_.first_block; i < part_.end_block; ++i) {
    blocks_.push_back(std::make_unique<Block<T>>("transformer.h." + std::to_string(i), cfg, tp_));
    add_child(*blocks_.back());
  }
  if (part_.last) {
    ln_f_ = std::make_unique<nn::LayerNorm<T>>("transformer.ln_f", cfg.n_embd);
    add_child(*ln_f_);
  }
}

template <typename T>
std::vector<std::vector<nn::Parameter*>> GPT<T>::parameter_groups() {
  std::vector<std::vector<nn::Parameter*>> groups(1);
  if (part_.first) groups[0] = {wte_, wpe_};
  for (auto& block : blocks_) groups.push_back(block->parameters());
  groups.emplace_back();
  if (part_.last) {
    groups.back() = ln_f_->parameters();
    if (!part_.first) groups.back().push_back(wte_);
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
Tensor GPT<T>::lm_head_forward(nn::Context& ctx, const Tensor& xf, Tensor* saved_xf) {
  // v: this rank's rows of the vocabulary (all of it without tensor parallelism).
  const int64_t n = xf.dim(0), c = cfg_.n_embd, v = wte_->value.dim(0);
  Tensor logits = nn::activation(ctx, {n, v}, dtype_of<T>());  // [N, V]
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = wte_->value.dtype();
    if (pd != DType::kF32) {  // 16-bit parameters: a 16-bit GEMM on a 16-bit copy of xf
      Tensor xl = nn::activation(ctx, {n, c}, pd);  // [N, C]
      k::convert(xl, xf);
      k::gemm_lowp(pd, false, true, n, v, c, 1.0f, xl.raw(), c, wte_->value.raw(), c, 0.0f,
                   logits.raw(), DType::kF32, v);
      if (saved_xf) *saved_xf = xl;
      return logits;
    }
  }
  k::gemm<T>(false, true, n, v, c, T(1), xf.data<T>(), c, wte_->value.data<T>(), c, T(0),
             logits.data<T>(), v);
  if (saved_xf) *saved_xf = xf;
  return logits;
}

template <typename T>
void GPT<T>::lm_head_backward(nn::Context& ctx, Tensor dlogits, const Tensor& xf, Tensor& dxf) {
  // logits = xf @ wte^T: dxf += dlogits @ wte; dwte += dlogits^T @ xf
  const int64_t n = dlogits.dim(0), v = dlogits.dim(1), c = cfg_.n_embd;
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = xf.dtype();
    if (pd != DType::kF32) {
      Tensor dl = nn::activation(ctx, {n, v}, pd);  // [N, V] 16-bit copy of dlogits
      k::convert(dl, dlogits);
      dlogits = Tensor();  // the fp32 [N, V] is the largest buffer: free it before the GEMMs
      k::gemm_lowp(pd, false, false, n, c, v, 1.0f, dl.raw(), v, wte_->value.raw(), c, 1.0f,
                   dxf.raw(), DType::kF32, c);
      ctx.progress();
      k::gemm_lowp(pd, true, false, v, c, n, 1.0f, dl.raw(), v, xf.raw(), c, 1.0f, wte_->grad.raw(),
                   pd, c);
      return;
    }
  }
  k::gemm<T>(false, false, n, c, v, T(1), dlogits.data<T>(), v, wte_->value.data<T>(), c, T(1),
             dxf.data<T>(), c);
  ctx.progress();
  k::gemm<T>(true, false, v, c, n, T(1), dlogits.data<T>(), v, xf.data<T>(), c, T(1),
             wte_->grad.data<T>(), c);
}

template <typename T>
double GPT<T>::loss_forward(nn::Context& ctx, const Tensor& x, const Tensor& targets,
                            double loss_weight) {
  // ln_f, the tied LM head and the fused softmax cross-entropy. In a last
  // part that is not the first, wte belongs to the final group.
  const int last = num_groups() - 1;
  const int64_t n = x.dim(0);
  call(group_hooks_.before_forward, last);
  Tensor xf = ln_f_->forward(ctx, x);  // [N, C]
  if (part_.first) call(group_hooks_.after_forward, last);
  State st;
  Tensor logits = lm_head_forward(ctx, xf, ctx.training ? &st.xf : nullptr);  // [N, V]
  call(group_hooks_.after_forward, part_.first ? 0 : last);
  Tensor losses = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  Tensor lse = nn::activation(ctx, {n}, dtype_of<T>());     // [N]
  Tensor flat_targets = targets.view({n});
  if constexpr (std::is_same_v<T, float>) {
    if (tp_)  // the vocab-parallel cross-entropy: 3 all-reduces of [N], no full logits
      parallel::tp::vocab_parallel_cross_entropy_forward(
          *tp_, losses, lse, logits, flat_targets, vocab_start_, cfg_.vocab_size, ctx.allocator);
  }
  if (!tp_) k::softmax_xent_forward<T>(losses, lse, logits, flat_targets);
  double sum = 0;
  const T* l = losses.data<T>();  // ignored targets have loss 0
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(l[i]);
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
  Tensor x = input;
  if (part_.first) {
    call(group_hooks_.before_forward, 0);
    x = nn::activation(ctx, {b, t, c}, dtype_of<T>());  // [B,T,C]
    embed(ctx, x, tokens);
    x = x.view({b * t, c});
  } else {
    KIRI_CHECK(x.defined() && x.shape() == Shape({b * t, c}),
               "a model part after the first takes "
               "its input [",
               b * t, ", ", c, "]");
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
    if (part_.first) call(group_hooks_.after_forward, 0);
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
Tensor GPT<T>::backward_part(nn::Context& ctx, const Tensor& dout) {
  State st = saved_.take(ctx, "GPT");
  const int64_t b = st.tokens.dim(0), t = st.tokens.dim(1), n = b * t, c = cfg_.n_embd;
  const int last = num_groups() - 1;
  Tensor dx;
  if (part_.last) {
    call(group_hooks_.before_backward, part_.first ? 0 : last);
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
    if (tp_) tp_->all_reduce(dxf, comm::ReduceOp::kSum);
    // The LM head's copy of wte is complete here in a last part that is
    // not the first (and, with the rows deferred, so is the whole model's).
    if (hook_ && (defer_embedding_grad_ || !part_.first)) hook_({wte_});
    dx = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
    if (part_.first) call(group_hooks_.before_backward, last);
    ln_f_->backward(ctx, dxf, dx);
    call(group_hooks_.after_backward, last);
    if (hook_) hook_(ln_f_->parameters());
  } else {
    KIRI_CHECK(dout.defined() && dout.shape() == Shape({n, c}),
               "a model part before the last takes the gradient of its output [", n, ", ", c, "]");
    dx = dout;
  }
  for (size_t i = blocks_.size(); i-- > 0;) {
    const int group = static_cast<int>(i) + 1;
    call(group_hooks_.before_backward, group);
    Tensor dprev = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
    blocks_[i]->backward(ctx, dx, dprev);
    dx = dprev;
    call(group_hooks_.after_backward, group);
    if (hook_) hook_(blocks_[i]->parameters());
  }
  if (!part_.first) return dx;
  if (!part_.last) call(group_hooks_.before_backward, 0);
  Tensor dx3 = dx.view({b, t, c});
  k::position_embedding_backward<T>(wpe_->grad, dx3);
  if (defer_embedding_grad_) {
    deferred_tokens_ = st.tokens.view({n});
    deferred_dx_ = dx;
    if (hook_) hook_({wpe_});
  } else {
    embed_backward(dx, st.tokens.view({n}));
    if (hook_) hook_({wte_, wpe_});
  }
  call(group_hooks_.after_backward, 0);
  return Tensor();
}

template <typename T>
void GPT<T>::embed(nn::Context& ctx, Tensor& x, const Tensor& tokens) {
  if constexpr (std::is_same_v<T, float>) {
    if (tp_) {  // each rank looks up its rows, one all-reduce sums them; then + wpe
      parallel::tp::vocab_parallel_embedding_forward(*tp_, x, tokens, wte_->value, vocab_start_);
      Tensor wpe = wpe_->value;
      if (wpe.dtype() != DType::kF32) {
        wpe = Tensor::empty(wpe_->value.shape(), DType::kF32, Category::kBuffers, ctx.allocator);
        k::convert(wpe, wpe_->value);
      }
      const int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2);
      float* xd = x.data<float>();
      const float* pd = wpe.data<float>();
      for (int64_t i = 0; i < b; ++i)
        for (int64_t j = 0; j < t * c; ++j) xd[i * t * c + j] += pd[j];
      return;
    }
  }
  k::embedding_forward<T>(x, tokens, wte_->value, wpe_->value);
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
  call(group_hooks_.before_forward, 0);
  Tensor x = nn::activation(ctx, {1, t, c}, dtype_of<T>());  // [1,T,C]
  k::embedding_forward<T>(x, tokens, wte_->value, wpe_->value);
  x = x.view({t, c});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    call(group_hooks_.before_forward, static_cast<int>(i) + 1);
    x = blocks_[i]->forward(ctx, x, 1, t);
    call(group_hooks_.after_forward, static_cast<int>(i) + 1);
  }
  const int last = num_groups() - 1;
  call(group_hooks_.before_forward, last);
  Tensor xf = ln_f_->forward(ctx, x);
  call(group_hooks_.after_forward, last);
  Tensor logits = lm_head_forward(ctx, xf.flat_range((t - 1) * c, c).view({1, c}), nullptr);
  call(group_hooks_.after_forward, 0);
  ctx.training = training;
  return logits.view({cfg_.vocab_size});
}

template class Block<float>;
template class Block<double>;
template class GPT<float>;
template class GPT<double>;

}  // namespace kiri::model
