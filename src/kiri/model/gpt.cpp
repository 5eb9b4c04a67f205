#include "kiri/model/gpt.h"

#include <cmath>

#include "kiri/kernels/cpu/ops.h"

namespace kiri::model {

namespace k = kiri::kernels;

void GPTConfig::validate() const {
  KIRI_CHECK_KIND(kConfig, n_layer >= 1, "model.n_layer must be >= 1, got ", n_layer);
  KIRI_CHECK_KIND(kConfig, n_head >= 1, "model.n_head must be >= 1, got ", n_head);
  KIRI_CHECK_KIND(kConfig, n_embd >= 1, "model.n_embd must be >= 1, got ", n_embd);
  KIRI_CHECK_KIND(kConfig, n_embd % n_head == 0, "model.n_head = ", n_head,
                  " must divide model.n_embd = ", n_embd);
  KIRI_CHECK_KIND(kConfig, vocab_size >= 2, "model.vocab_size must be >= 2, got ", vocab_size);
  KIRI_CHECK_KIND(kConfig, block_size >= 1, "model.block_size must be >= 1, got ", block_size);
}

int64_t GPTConfig::num_parameters() const {
  const int64_t c = n_embd, l = n_layer;
  const int64_t per_block =
      2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return int64_t{vocab_size} * c + int64_t{block_size} * c + l * per_block + 2 * c;
}

double GPTConfig::flops_per_token(int64_t seq) const {
  const double c = n_embd, l = n_layer;
  const double matmul_params = l * 12.0 * c * c + double(vocab_size) * c;
  return 6.0 * matmul_params + 12.0 * l * c * double(seq);
}

template <typename T>
Block<T>::Block(const std::string& name, const GPTConfig& cfg)
    : nn::Module(name),
      ln_1_(child_name("ln_1"), cfg.n_embd),
      attn_(child_name("attn"), cfg.n_embd, cfg.n_head, 0.02, 0.02 / std::sqrt(2.0 * cfg.n_layer)),
      ln_2_(child_name("ln_2"), cfg.n_embd),
      mlp_(child_name("mlp"), cfg.n_embd, 0.02, 0.02 / std::sqrt(2.0 * cfg.n_layer)) {
  add_child(ln_1_);
  add_child(attn_);
  add_child(ln_2_);
  add_child(mlp_);
}

template <typename T>
Tensor Block<T>::forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
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
GPT<T>::GPT(const GPTConfig& cfg)
    : nn::Module(""), cfg_(cfg), ln_f_("transformer.ln_f", cfg.n_embd) {
  cfg.validate();
  wte_ = &add_parameter("transformer.wte.weight", {cfg.vocab_size, cfg.n_embd}, true,
                        {nn::InitKind::kNormal, 0.02});
  wpe_ = &add_parameter("transformer.wpe.weight", {cfg.block_size, cfg.n_embd}, true,
                        {nn::InitKind::kNormal, 0.02});
  for (int i = 0; i < cfg.n_layer; ++i) {
    blocks_.push_back(std::make_unique<Block<T>>("transformer.h." + std::to_string(i), cfg));
    add_child(*blocks_.back());
  }
  add_child(ln_f_);
}

template <typename T>
Tensor GPT<T>::trunk_forward(nn::Context& ctx, const Tensor& tokens) {
  KIRI_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::kI32, "tokens must be [B, T] I32, got ",
             tokens.shape().str());
  const int64_t b = tokens.dim(0), t = tokens.dim(1), c = cfg_.n_embd;
  KIRI_CHECK(t <= cfg_.block_size, "sequence length ", t, " exceeds model.block_size ",
             cfg_.block_size);
  Tensor x = nn::activation(ctx, {b, t, c}, dtype_of<T>());  // [B,T,C]
  k::embedding_forward<T>(x, tokens, wte_->value, wpe_->value);
  x = x.view({b * t, c});
  for (auto& block : blocks_) x = block->forward(ctx, x, b, t);
  return ln_f_.forward(ctx, x);  // [N, C]
}

template <typename T>
double GPT<T>::forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                       double loss_weight) {
  KIRI_CHECK(targets.shape() == tokens.shape() && targets.dtype() == DType::kI32,
             "targets must be I32 of the tokens' shape ", tokens.shape().str(), ", got ",
             targets.shape().str());
  const int64_t n = tokens.numel(), c = cfg_.n_embd, v = cfg_.vocab_size;
  Tensor xf = trunk_forward(ctx, tokens);
  Tensor logits = nn::activation(ctx, {n, v}, dtype_of<T>());  // [N, V]
  k::gemm<T>(false, true, n, v, c, T(1), xf.data<T>(), c, wte_->value.data<T>(), c, T(0),
             logits.data<T>(), v);
  Tensor losses = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  Tensor lse = nn::activation(ctx, {n}, dtype_of<T>());     // [N]
  Tensor flat_targets = targets.view({n});
  k::softmax_xent_forward<T>(losses, lse, logits, flat_targets);
  double sum = 0;
  const T* l = losses.data<T>();  // ignored targets have loss 0
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(l[i]);
  if (ctx.training) {
    tokens_ = tokens;
    targets_ = flat_targets;
    xf_ = xf;
    logits_ = logits;
    lse_ = lse;
    loss_weight_ = loss_weight;
  }
  return sum;
}

template <typename T>
void GPT<T>::backward(nn::Context& ctx) {
  KIRI_CHECK(logits_.defined(), "backward() without a training forward()");
  const int64_t n = logits_.dim(0), v = logits_.dim(1), c = cfg_.n_embd;
  Tensor dloss = nn::activation(ctx, {n}, dtype_of<T>());  // [N]
  dloss.fill_(loss_weight_);
  k::softmax_xent_backward<T>(logits_, lse_, targets_, dloss);
  Tensor& dlogits = logits_;                                      // overwritten in place: [N, V]
  Tensor dxf = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
  // logits = xf @ wte^T: dxf += dlogits @ wte; dwte += dlogits^T @ xf
  k::gemm<T>(false, false, n, c, v, T(1), dlogits.data<T>(), v, wte_->value.data<T>(), c, T(1),
             dxf.data<T>(), c);
  ctx.progress();
  k::gemm<T>(true, false, v, c, n, T(1), dlogits.data<T>(), v, xf_.data<T>(), c, T(1),
             wte_->grad.data<T>(), c);
  logits_ = lse_ = xf_ = Tensor();
  if (defer_embedding_grad_ && hook_) hook_({wte_});
  Tensor dx = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
  ln_f_.backward(ctx, dxf, dx);
  dxf = Tensor();
  if (hook_) hook_(ln_f_.parameters());
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Tensor dprev = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C]
    (*it)->backward(ctx, dx, dprev);
    dx = dprev;
    if (hook_) hook_((*it)->parameters());
  }
  Tensor dx3 = dx.view({tokens_.dim(0), tokens_.dim(1), c});
  k::position_embedding_backward<T>(wpe_->grad, dx3);
  if (defer_embedding_grad_) {
    deferred_tokens_ = tokens_.view({n});
    deferred_dx_ = dx;
    if (hook_) hook_({wpe_});
  } else {
    add_token_embedding_grad(tokens_.view({n}), dx);
    if (hook_) hook_({wte_, wpe_});
  }
  tokens_ = targets_ = Tensor();
}

template <typename T>
void GPT<T>::add_token_embedding_grad(const Tensor& tokens, const Tensor& dx) {
  k::token_embedding_backward<T>(wte_->grad, dx, tokens);
}

template <typename T>
Tensor GPT<T>::next_token_logits(nn::Context& ctx, const Tensor& tokens) {
  KIRI_CHECK(tokens.rank() == 2 && tokens.dim(0) == 1, "sampling takes tokens [1, T], got ",
             tokens.shape().str());
  const bool training = ctx.training;
  ctx.training = false;
  Tensor xf = trunk_forward(ctx, tokens);
  ctx.training = training;
  const int64_t t = tokens.dim(1), c = cfg_.n_embd, v = cfg_.vocab_size;
  Tensor logits = nn::activation(ctx, {v}, dtype_of<T>());  // [V]
  k::gemm<T>(false, true, 1, v, c, T(1), xf.data<T>() + (t - 1) * c, c, wte_->value.data<T>(), c,
             T(0), logits.data<T>(), v);
  return logits;
}

template class Block<float>;
template class Block<double>;
template class GPT<float>;
template class GPT<double>;

}  // namespace kiri::model
