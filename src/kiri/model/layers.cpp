#include "kiri/model/layers.h"

#include <utility>

#include "kiri/kernels/ops.h"

namespace kiri::model {

namespace k = kiri::kernels;
using parallel::tp::TensorParallel;

namespace {

// This rank's heads of n_head over the tp group (kConfig naming the numbers).
int heads_per_rank(int n_head, const TensorParallel& tp) {
  KIRI_CHECK_KIND(kConfig, n_head % tp.size() == 0, "parallel.tp = ", tp.size(),
                  " must divide model.n_head = ", n_head);
  return n_head / tp.size();
}

// This rank's query heads, once tp divides both head counts.
int query_heads_per_rank(int n_head, int n_kv_head, const TensorParallel& tp) {
  const int p = tp.size();
  KIRI_CHECK_KIND(kConfig, n_kv_head >= 1 && n_head % n_kv_head == 0,
                  "model.num_key_value_heads = ", n_kv_head,
                  " must divide model.n_head = ", n_head);
  KIRI_CHECK_KIND(kConfig, n_head % p == 0 && n_kv_head % p == 0, "parallel.tp = ", p,
                  " must divide both model.n_head = ", n_head,
                  " and model.num_key_value_heads = ", n_kv_head,
                  " (tensor parallelism splits the query and the key/value heads)");
  return n_head / p;
}

}  // namespace

template <typename T>
CausalSelfAttention<T>::CausalSelfAttention(const std::string& name, int64_t channels, int n_head,
                                            double init_std, double proj_init_std)
    : nn::SequenceLayer<T>(name),
      n_head_(n_head),
      c_attn_(this->child_name("c_attn"), channels, 3 * channels, init_std, 3),
      core_(n_head),
      c_proj_(this->child_name("c_proj"), channels, channels, proj_init_std) {
  this->add_child(c_attn_);
  this->add_child(c_proj_);
}

template <typename T>
void CausalSelfAttention<T>::apply_tp(const TensorParallel& tp) {
  core_ = nn::CausalAttentionCore<T>(heads_per_rank(n_head_, tp));
  input_.apply_tp(tp);
  c_attn_.apply_tp(tp);
  c_proj_.apply_tp(tp);
}

template <typename T>
void CausalSelfAttention<T>::set_recompute(
    const SelectiveRecompute& r, typename parallel::tp::ColumnParallelInput<T>::Source input) {
  core_.set_recompute(r.core_attn);
  input_.set_source(r.layernorm ? std::move(input) : nullptr);
}

template <typename T>
Tensor CausalSelfAttention<T>::forward(nn::Context& ctx, const Tensor& x, int64_t batch,
                                       int64_t seq) {
  const Tensor xr = input_.forward(ctx, x, c_attn_.weight().value);  // [N, C]
  Tensor qkv = c_attn_.forward(ctx, xr);  // [N, 3C/P]: this rank's heads of q, k and v
  const int64_t c = qkv.dim(1) / 3;
  Tensor att = core_.forward(ctx, qkv.view({batch, seq, 3 * c}));  // [B,T,C/P]
  if (ctx.training) dims_.put(ctx) = {batch, seq};
  return c_proj_.forward(ctx, att.view({batch * seq, c}));  // [N, C] (sp: [N/P, C])
}

template <typename T>
void CausalSelfAttention<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  const AttentionDims d = dims_.take(ctx, "CausalSelfAttention");
  const int64_t n = d.batch * d.seq, c = c_attn_.cols() / 3;       // c: this rank's heads' width
  Tensor datt = nn::activation_zeros(ctx, {n, c}, dtype_of<T>());  // [N, C/P]
  c_proj_.backward(ctx, dy, datt);
  Tensor dqkv = nn::activation_zeros(ctx, {d.batch, d.seq, 3 * c}, dtype_of<T>());  // [B,T,3C/P]
  core_.backward(ctx, datt.view({d.batch, d.seq, c}), dqkv);
  const Tensor xr = input_.saved_input(ctx, c_attn_.weight().value);  // [N, C]
  Tensor target = input_.grad_target(ctx, dx, xr.dim(0));             // [N, C]
  c_attn_.backward(ctx, dqkv.view({n, 3 * c}), xr, target);
  input_.finish_backward(ctx, target, dx);
}

template <typename T>
Mlp<T>::Mlp(const std::string& name, int64_t channels, double init_std, double proj_init_std)
    : nn::RowLayer<T>(name),
      c_fc_(this->child_name("c_fc"), channels, 4 * channels, init_std),
      c_proj_(this->child_name("c_proj"), 4 * channels, channels, proj_init_std) {
  this->add_child(c_fc_);
  this->add_child(c_proj_);
}

template <typename T>
void Mlp<T>::apply_tp(const TensorParallel& tp) {
  input_.apply_tp(tp);
  c_fc_.apply_tp(tp);
  c_proj_.apply_tp(tp);
}

template <typename T>
void Mlp<T>::set_recompute(const SelectiveRecompute& r,
                           typename parallel::tp::ColumnParallelInput<T>::Source input) {
  recompute_act_ = r.mlp_act;
  c_proj_.set_recompute_input(r.mlp_act);
  input_.set_source(r.layernorm ? std::move(input) : nullptr);
}

template <typename T>
Tensor Mlp<T>::forward(nn::Context& ctx, const Tensor& x) {
  const Tensor xr = input_.forward(ctx, x, c_fc_.weight().value);  // [N, C]
  Tensor h = c_fc_.forward(ctx, xr);                               // [N, 4C/P]
  Tensor g = gelu_output(ctx, h);                                  // [N, 4C/P]
  if (ctx.training) h_.put(ctx) = h;
  return c_proj_.forward(ctx, g);  // [N, C] (sp: [N/P, C])
}

template <typename T>
Tensor Mlp<T>::gelu_output(nn::Context& ctx, const Tensor& h) {
  // In the dtype c_proj's GEMM reads (16-bit under mixed precision: rounded in the same pass).
  Tensor g = nn::activation(ctx, h.shape(), nn::gemm_input_dtype<T>(c_proj_.weight().value));
  k::gelu_forward<T>(g, h);
  return g;
}

template <typename T>
void Mlp<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  Tensor h = h_.take(ctx, "Mlp");
  Tensor dg = nn::activation_zeros(ctx, h.shape(), dtype_of<T>());  // [N, 4C/P]
  Tensor g;  // mlp_act: GELU's output again [N, 4C/P]
  if (recompute_act_) g = gelu_output(ctx, h);
  c_proj_.backward(ctx, dy, dg, g);
  g = Tensor();
  // GELU's backward with c_fc's bias gradient in one pass, dh in the dtype c_fc's GEMMs take.
  const Tensor dh = c_fc_.gelu_bias_backward(ctx, std::move(dg), std::move(h));  // [N, 4C/P]
  const Tensor xr = input_.saved_input(ctx, c_fc_.weight().value);               // [N, C]
  Tensor target = input_.grad_target(ctx, dx, xr.dim(0));                        // [N, C]
  c_fc_.backward_gemms(ctx, dh, xr, target);
  input_.finish_backward(ctx, target, dx);
}

template <typename T>
LlamaAttention<T>::LlamaAttention(const std::string& name, int64_t channels, int n_head,
                                  int n_kv_head, double init_std,
                                  std::shared_ptr<const nn::RopeTable> rope)
    : nn::SequenceLayer<T>(name),
      n_head_(n_head),
      n_kv_head_(n_kv_head),
      rope_(std::move(rope)),
      q_proj_(this->child_name("q_proj"), channels, channels, init_std, 1,
              nn::LinearLayout::kOutInNoBias),
      k_proj_(this->child_name("k_proj"), channels, channels / n_head * n_kv_head, init_std, 1,
              nn::LinearLayout::kOutInNoBias),
      v_proj_(this->child_name("v_proj"), channels, channels / n_head * n_kv_head, init_std, 1,
              nn::LinearLayout::kOutInNoBias),
      core_(query_heads_per_rank(n_head, n_kv_head, TensorParallel{}), n_kv_head),
      o_proj_(this->child_name("o_proj"), channels, channels, init_std,
              nn::LinearLayout::kOutInNoBias) {
  KIRI_CHECK(rope_ && rope_->cos().dim(1) * 2 == channels / n_head, this->name(),
             ": the rotary table does not fit heads of ", channels / n_head);
  this->add_child(q_proj_);
  this->add_child(k_proj_);
  this->add_child(v_proj_);
  this->add_child(o_proj_);
}

template <typename T>
void LlamaAttention<T>::apply_tp(const TensorParallel& tp) {
  input_.apply_tp(tp);
  q_proj_.apply_tp(tp);
  k_proj_.apply_tp(tp);
  v_proj_.apply_tp(tp);
  core_ = nn::GqaAttentionCore<T>(query_heads_per_rank(n_head_, n_kv_head_, tp),
                                  n_kv_head_ / tp.size());
  o_proj_.apply_tp(tp);
}

template <typename T>
void LlamaAttention<T>::set_recompute(const SelectiveRecompute& r,
                                      typename parallel::tp::ColumnParallelInput<T>::Source input) {
  core_.set_recompute(r.core_attn);
  input_.set_source(r.layernorm ? std::move(input) : nullptr);
}

template <typename T>
Tensor LlamaAttention<T>::forward(nn::Context& ctx, const Tensor& x, int64_t batch, int64_t seq) {
  const Tensor xr = input_.forward(ctx, x, q_proj_.weight().value);  // [N, C]
  const Tensor q2 = q_proj_.forward(ctx, xr);            // [N, Hq*hs]: this rank's query heads
  const Tensor k2 = k_proj_.forward(ctx, xr);            // [N, Hkv*hs]: its key/value heads
  const Tensor v2 = v_proj_.forward(ctx, xr);            // [N, Hkv*hs]
  Tensor q = q2.view({batch, seq, q2.dim(1)});           // [B,T,Hq*hs]
  Tensor k = k2.view({batch, seq, k2.dim(1)});           // [B,T,Hkv*hs]
  Tensor v = v2.view({batch, seq, v2.dim(1)});           // [B,T,Hkv*hs]
  k::rope_forward<T>(q, q, rope_->cos(), rope_->sin());  // in place: the rotated q is kept
  k::rope_forward<T>(k, k, rope_->cos(), rope_->sin());
  Tensor att = core_.forward(ctx, q, k, v);  // [B,T,Hq*hs]
  if (ctx.training) dims_.put(ctx) = {batch, seq};
  return o_proj_.forward(ctx, att.view({batch * seq, att.dim(2)}));  // [N, C] (sp: [N/P, C])
}

template <typename T>
void LlamaAttention<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  const AttentionDims d = dims_.take(ctx, "LlamaAttention");
  const int64_t b = d.batch, t = d.seq, n = b * t, wq = q_proj_.cols(), wk = k_proj_.cols();
  const DType dt = dtype_of<T>();
  Tensor datt = nn::activation_zeros(ctx, {n, wq}, dt);  // [N, Hq*hs]
  o_proj_.backward(ctx, dy, datt);
  Tensor dq = nn::activation_zeros(ctx, {b, t, wq}, dt);  // [B,T,Hq*hs] of the rotated q
  Tensor dk = nn::activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs] of the rotated k
  Tensor dv = nn::activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs]
  core_.backward(ctx, datt.view({b, t, wq}), dq, dk, dv);
  datt = Tensor();
  // Back through the rotation (its transpose turns the other way).
  Tensor dq0 = nn::activation_zeros(ctx, {b, t, wq}, dt);  // [B,T,Hq*hs]
  k::rope_backward<T>(dq0, dq, rope_->cos(), rope_->sin());
  dq = Tensor();
  Tensor dk0 = nn::activation_zeros(ctx, {b, t, wk}, dt);  // [B,T,Hkv*hs]
  k::rope_backward<T>(dk0, dk, rope_->cos(), rope_->sin());
  dk = Tensor();
  // q, k and v read one X_region: their partial input gradients are summed, then reduced once.
  const Tensor xr = input_.saved_input(ctx, q_proj_.weight().value);  // [N, C]
  Tensor target = input_.grad_target(ctx, dx, xr.dim(0));             // [N, C]
  q_proj_.backward(ctx, dq0.view({n, wq}), xr, target);
  k_proj_.backward(ctx, dk0.view({n, wk}), xr, target);
  v_proj_.backward(ctx, dv.view({n, wk}), xr, target);
  input_.finish_backward(ctx, target, dx);
}

template <typename T>
SwiGluMlp<T>::SwiGluMlp(const std::string& name, int64_t channels, int64_t hidden, double init_std)
    : nn::RowLayer<T>(name),
      gate_proj_(this->child_name("gate_proj"), channels, hidden, init_std, 1,
                 nn::LinearLayout::kOutInNoBias),
      up_proj_(this->child_name("up_proj"), channels, hidden, init_std, 1,
               nn::LinearLayout::kOutInNoBias),
      down_proj_(this->child_name("down_proj"), hidden, channels, init_std,
                 nn::LinearLayout::kOutInNoBias) {
  this->add_child(gate_proj_);
  this->add_child(up_proj_);
  this->add_child(down_proj_);
}

template <typename T>
void SwiGluMlp<T>::apply_tp(const TensorParallel& tp) {
  input_.apply_tp(tp);
  gate_proj_.apply_tp(tp);
  up_proj_.apply_tp(tp);
  down_proj_.apply_tp(tp);
}

template <typename T>
void SwiGluMlp<T>::set_recompute(const SelectiveRecompute& r,
                                 typename parallel::tp::ColumnParallelInput<T>::Source input) {
  recompute_act_ = r.mlp_act;
  down_proj_.set_recompute_input(r.mlp_act);
  input_.set_source(r.layernorm ? std::move(input) : nullptr);
}

template <typename T>
Tensor SwiGluMlp<T>::forward(nn::Context& ctx, const Tensor& x) {
  const Tensor xr = input_.forward(ctx, x, gate_proj_.weight().value);  // [N, C]
  Tensor gate = gate_proj_.forward(ctx, xr);                            // [N, I/P]
  Tensor up = up_proj_.forward(ctx, xr);                                // [N, I/P]
  Tensor h = nn::activation(ctx, gate.shape(), dtype_of<T>());          // [N, I/P]
  k::swiglu_forward<T>(h, gate, up);
  if (ctx.training) saved_.put(ctx) = {gate, up};
  return down_proj_.forward(ctx, h);  // [N, C] (sp: [N/P, C])
}

template <typename T>
void SwiGluMlp<T>::backward(nn::Context& ctx, const Tensor& dy, Tensor& dx) {
  State s = saved_.take(ctx, "SwiGluMlp");
  const DType dt = dtype_of<T>();
  Tensor dh = nn::activation_zeros(ctx, s.gate.shape(), dt);  // [N, I/P]
  Tensor h;  // mlp_act: the SwiGLU's output again [N, I/P]
  if (recompute_act_) {
    h = nn::activation(ctx, s.gate.shape(), dt);
    k::swiglu_forward<T>(h, s.gate, s.up);
  }
  down_proj_.backward(ctx, dy, dh, h);
  h = Tensor();
  Tensor dgate = nn::activation_zeros(ctx, s.gate.shape(), dt);  // [N, I/P]
  Tensor dup = nn::activation_zeros(ctx, s.gate.shape(), dt);    // [N, I/P]
  k::swiglu_backward<T>(dgate, dup, s.gate, s.up, dh);
  s = State();
  dh = Tensor();
  const Tensor xr = input_.saved_input(ctx, gate_proj_.weight().value);  // [N, C]
  Tensor target = input_.grad_target(ctx, dx, xr.dim(0));                // [N, C]
  gate_proj_.backward(ctx, dgate, xr, target);
  up_proj_.backward(ctx, dup, xr, target);
  input_.finish_backward(ctx, target, dx);
}

template class CausalSelfAttention<float>;
template class CausalSelfAttention<double>;
template class Mlp<float>;
template class Mlp<double>;
template class LlamaAttention<float>;
template class LlamaAttention<double>;
template class SwiGluMlp<float>;
template class SwiGluMlp<double>;

}  // namespace kiri::model
