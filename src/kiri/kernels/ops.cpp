#include "kiri/kernels/ops.h"

#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/dispatch.h"

// The front of the tensor ops (ops.h): each finds the backend that computes on its tensors'
// device (dispatch.h) and calls that backend's op with the same arguments.
namespace kiri::kernels {

using dispatch::Backend;
using dispatch::backend_of;
using dispatch::no_backend;

void convert(Tensor& dst, const Tensor& src) {
  switch (backend_of("convert", {&dst, &src})) {
    case Backend::kCpu:
      return cpu::convert(dst, src);
  }
  no_backend("convert");
}

void add_into(Tensor& dst, const Tensor& src) {
  switch (backend_of("add_into", {&dst, &src})) {
    case Backend::kCpu:
      return cpu::add_into(dst, src);
  }
  no_backend("add_into");
}

bool all_finite(const Tensor& x) {
  switch (backend_of("all_finite", {&x})) {
    case Backend::kCpu:
      return cpu::all_finite(x);
  }
  no_backend("all_finite");
}

template <typename T>
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  switch (backend_of("linear_forward", {&out, &inp, &weight, &bias})) {
    case Backend::kCpu:
      return cpu::linear_forward<T>(out, inp, weight, bias);
  }
  no_backend("linear_forward");
}

template <typename T>
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight) {
  switch (backend_of("linear_backward", {&dinp, &dweight, &dbias, &dout, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_backward<T>(dinp, dweight, dbias, dout, inp, weight);
  }
  no_backend("linear_backward");
}

void linear_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias) {
  switch (backend_of("linear_forward_lowp", {&out, &inp, &weight, &bias})) {
    case Backend::kCpu:
      return cpu::linear_forward_lowp(out, inp, weight, bias);
  }
  no_backend("linear_forward_lowp");
}

void linear_backward_lowp(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, Allocator& scratch) {
  switch (backend_of("linear_backward_lowp", {&dinp, &dweight, &dbias, &dout, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_backward_lowp(dinp, dweight, dbias, dout, inp, weight, scratch);
  }
  no_backend("linear_backward_lowp");
}

template <typename T>
void linear_nt_forward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  switch (backend_of("linear_nt_forward", {&out, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_nt_forward<T>(out, inp, weight);
  }
  no_backend("linear_nt_forward");
}

template <typename T>
void linear_nt_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight) {
  switch (backend_of("linear_nt_backward", {&dinp, &dweight, &dout, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_nt_backward<T>(dinp, dweight, dout, inp, weight);
  }
  no_backend("linear_nt_backward");
}

void linear_nt_forward_lowp(Tensor& out, const Tensor& inp, const Tensor& weight) {
  switch (backend_of("linear_nt_forward_lowp", {&out, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_nt_forward_lowp(out, inp, weight);
  }
  no_backend("linear_nt_forward_lowp");
}

void linear_nt_backward_lowp(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                             const Tensor& weight, Allocator& scratch) {
  switch (backend_of("linear_nt_backward_lowp", {&dinp, &dweight, &dout, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::linear_nt_backward_lowp(dinp, dweight, dout, inp, weight, scratch);
  }
  no_backend("linear_nt_backward_lowp");
}

template <typename T>
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  switch (backend_of("embedding_forward", {&out, &tokens, &wte, &wpe})) {
    case Backend::kCpu:
      return cpu::embedding_forward<T>(out, tokens, wte, wpe);
  }
  no_backend("embedding_forward");
}

template <typename T>
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  switch (backend_of("embedding_backward", {&dwte, &dwpe, &dout, &tokens})) {
    case Backend::kCpu:
      return cpu::embedding_backward<T>(dwte, dwpe, dout, tokens);
  }
  no_backend("embedding_backward");
}

template <typename T>
void position_embedding_backward(Tensor& dwpe, const Tensor& dout) {
  switch (backend_of("position_embedding_backward", {&dwpe, &dout})) {
    case Backend::kCpu:
      return cpu::position_embedding_backward<T>(dwpe, dout);
  }
  no_backend("position_embedding_backward");
}

template <typename T>
void token_embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) {
  switch (backend_of("token_embedding_backward", {&dwte, &dout, &tokens})) {
    case Backend::kCpu:
      return cpu::token_embedding_backward<T>(dwte, dout, tokens);
  }
  no_backend("token_embedding_backward");
}

template <typename T>
void token_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte) {
  switch (backend_of("token_embedding_forward", {&out, &tokens, &wte})) {
    case Backend::kCpu:
      return cpu::token_embedding_forward<T>(out, tokens, wte);
  }
  no_backend("token_embedding_forward");
}

template <typename T>
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps) {
  switch (backend_of("layernorm_forward", {&out, &mean, &rstd, &inp, &weight, &bias})) {
    case Backend::kCpu:
      return cpu::layernorm_forward<T>(out, mean, rstd, inp, weight, bias, eps);
  }
  no_backend("layernorm_forward");
}

template <typename T>
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd) {
  switch (backend_of("layernorm_backward",
                     {&dinp, &dweight, &dbias, &dout, &inp, &weight, &mean, &rstd})) {
    case Backend::kCpu:
      return cpu::layernorm_backward<T>(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  }
  no_backend("layernorm_backward");
}

template <typename T>
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     double eps) {
  switch (backend_of("rmsnorm_forward", {&out, &rstd, &inp, &weight})) {
    case Backend::kCpu:
      return cpu::rmsnorm_forward<T>(out, rstd, inp, weight, eps);
  }
  no_backend("rmsnorm_forward");
}

template <typename T>
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd) {
  switch (backend_of("rmsnorm_backward", {&dinp, &dweight, &dout, &inp, &weight, &rstd})) {
    case Backend::kCpu:
      return cpu::rmsnorm_backward<T>(dinp, dweight, dout, inp, weight, rstd);
  }
  no_backend("rmsnorm_backward");
}

template <typename T>
void residual_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& weight,
                                const Tensor& bias, double eps) {
  switch (backend_of("residual_layernorm_forward",
                     {&sum, &out, &mean, &rstd, &a, &b, &weight, &bias})) {
    case Backend::kCpu:
      return cpu::residual_layernorm_forward<T>(sum, out, mean, rstd, a, b, weight, bias, eps);
  }
  no_backend("residual_layernorm_forward");
}

template <typename T>
void layernorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                                 Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd) {
  switch (backend_of("layernorm_backward_residual", {&dinp, &dbase, &dskip, &dweight, &dbias, &dout,
                                                     &inp, &weight, &mean, &rstd})) {
    case Backend::kCpu:
      return cpu::layernorm_backward_residual<T>(dinp, dbase, dskip, dweight, dbias, dout, inp,
                                                 weight, mean, rstd);
  }
  no_backend("layernorm_backward_residual");
}

template <typename T>
void residual_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& weight, double eps) {
  switch (backend_of("residual_rmsnorm_forward", {&sum, &out, &rstd, &a, &b, &weight})) {
    case Backend::kCpu:
      return cpu::residual_rmsnorm_forward<T>(sum, out, rstd, a, b, weight, eps);
  }
  no_backend("residual_rmsnorm_forward");
}

template <typename T>
void rmsnorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                               Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd) {
  switch (backend_of("rmsnorm_backward_residual",
                     {&dinp, &dbase, &dskip, &dweight, &dout, &inp, &weight, &rstd})) {
    case Backend::kCpu:
      return cpu::rmsnorm_backward_residual<T>(dinp, dbase, dskip, dweight, dout, inp, weight,
                                               rstd);
  }
  no_backend("rmsnorm_backward_residual");
}

template <typename T>
void gelu_forward(Tensor& out, const Tensor& inp) {
  switch (backend_of("gelu_forward", {&out, &inp})) {
    case Backend::kCpu:
      return cpu::gelu_forward<T>(out, inp);
  }
  no_backend("gelu_forward");
}

template <typename T>
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  switch (backend_of("gelu_backward", {&dinp, &inp, &dout})) {
    case Backend::kCpu:
      return cpu::gelu_backward<T>(dinp, inp, dout);
  }
  no_backend("gelu_backward");
}

template <typename T>
void gelu_backward_bias(Tensor& dinp, Tensor& dbias, const Tensor& inp, const Tensor& dout) {
  switch (backend_of("gelu_backward_bias", {&dinp, &dbias, &inp, &dout})) {
    case Backend::kCpu:
      return cpu::gelu_backward_bias<T>(dinp, dbias, inp, dout);
  }
  no_backend("gelu_backward_bias");
}

template <typename T>
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up) {
  switch (backend_of("swiglu_forward", {&out, &gate, &up})) {
    case Backend::kCpu:
      return cpu::swiglu_forward<T>(out, gate, up);
  }
  no_backend("swiglu_forward");
}

template <typename T>
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& gate, const Tensor& up,
                     const Tensor& dout) {
  switch (backend_of("swiglu_backward", {&dgate, &dup, &gate, &up, &dout})) {
    case Backend::kCpu:
      return cpu::swiglu_backward<T>(dgate, dup, gate, up, dout);
  }
  no_backend("swiglu_backward");
}

std::vector<double> rope_inv_freq(int64_t head_dim, const RopeParams& p) {
  return cpu::rope_inv_freq(head_dim, p);
}

template <typename T>
void rope_table(Tensor& cos, Tensor& sin, const std::vector<double>& inv_freq) {
  switch (backend_of("rope_table", {&cos, &sin})) {
    case Backend::kCpu:
      return cpu::rope_table<T>(cos, sin, inv_freq);
  }
  no_backend("rope_table");
}

template <typename T>
void rope_forward(Tensor& out, const Tensor& inp, const Tensor& cos, const Tensor& sin) {
  switch (backend_of("rope_forward", {&out, &inp, &cos, &sin})) {
    case Backend::kCpu:
      return cpu::rope_forward<T>(out, inp, cos, sin);
  }
  no_backend("rope_forward");
}

template <typename T>
void rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& cos, const Tensor& sin) {
  switch (backend_of("rope_backward", {&dinp, &dout, &cos, &sin})) {
    case Backend::kCpu:
      return cpu::rope_backward<T>(dinp, dout, cos, sin);
  }
  no_backend("rope_backward");
}

template <typename T>
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b) {
  switch (backend_of("residual_forward", {&out, &a, &b})) {
    case Backend::kCpu:
      return cpu::residual_forward<T>(out, a, b);
  }
  no_backend("residual_forward");
}

template <typename T>
void residual_backward(Tensor& da, Tensor& db, const Tensor& dout) {
  switch (backend_of("residual_backward", {&da, &db, &dout})) {
    case Backend::kCpu:
      return cpu::residual_backward<T>(da, db, dout);
  }
  no_backend("residual_backward");
}

int64_t attention_scratch_numel(int64_t T, int threads) {
  return cpu::attention_scratch_numel(T, threads);
}

template <typename T>
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, Tensor& scratch) {
  switch (backend_of("attention_forward", {&out, &lse, &qkv, &scratch})) {
    case Backend::kCpu:
      return cpu::attention_forward<T>(out, lse, qkv, n_head, scratch);
  }
  no_backend("attention_forward");
}

template <typename T>
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Tensor& scratch) {
  switch (backend_of("attention_backward", {&dqkv, &dout, &qkv, &out, &lse, &scratch})) {
    case Backend::kCpu:
      return cpu::attention_backward<T>(dqkv, dout, qkv, out, lse, n_head, scratch);
  }
  no_backend("attention_backward");
}

template <typename T>
void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int n_head, int n_kv_head, Tensor& scratch) {
  switch (backend_of("gqa_attention_forward", {&out, &lse, &q, &k, &v, &scratch})) {
    case Backend::kCpu:
      return cpu::gqa_attention_forward<T>(out, lse, q, k, v, n_head, n_kv_head, scratch);
  }
  no_backend("gqa_attention_forward");
}

template <typename T>
void gqa_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            int n_head, int n_kv_head, Tensor& scratch) {
  switch (backend_of("gqa_attention_backward",
                     {&dq, &dk, &dv, &dout, &q, &k, &v, &out, &lse, &scratch})) {
    case Backend::kCpu:
      return cpu::gqa_attention_backward<T>(dq, dk, dv, dout, q, k, v, out, lse, n_head, n_kv_head,
                                            scratch);
  }
  no_backend("gqa_attention_backward");
}

template <typename T>
void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits,
                          const Tensor& targets) {
  switch (backend_of("softmax_xent_forward", {&losses, &lse, &logits, &targets})) {
    case Backend::kCpu:
      return cpu::softmax_xent_forward<T>(losses, lse, logits, targets);
  }
  no_backend("softmax_xent_forward");
}

template <typename T>
void softmax_xent_backward(Tensor& logits_to_dlogits, const Tensor& lse, const Tensor& targets,
                           const Tensor& dloss) {
  switch (backend_of("softmax_xent_backward", {&logits_to_dlogits, &lse, &targets, &dloss})) {
    case Backend::kCpu:
      return cpu::softmax_xent_backward<T>(logits_to_dlogits, lse, targets, dloss);
  }
  no_backend("softmax_xent_backward");
}

template <typename T>
void softmax_xent_forward_backward(Tensor& losses, Tensor& lse, Tensor& logits, Tensor& dlogits,
                                   const Tensor& targets, const Tensor& dloss) {
  switch (backend_of("softmax_xent_forward_backward",
                     {&losses, &lse, &logits, &dlogits, &targets, &dloss})) {
    case Backend::kCpu:
      return cpu::softmax_xent_forward_backward<T>(losses, lse, logits, dlogits, targets, dloss);
  }
  no_backend("softmax_xent_forward_backward");
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                  Tensor* lowp_param) {
  switch (backend_of("adamw_update", {&param, &grad, &m, &v, lowp_param})) {
    case Backend::kCpu:
      return cpu::adamw_update(param, grad, m, v, p, lowp_param);
  }
  no_backend("adamw_update");
}

double sum_of_squares(const Tensor& x) {
  switch (backend_of("sum_of_squares", {&x})) {
    case Backend::kCpu:
      return cpu::sum_of_squares(x);
  }
  no_backend("sum_of_squares");
}

// The scalars the callers use: float for training, double for the gradient checks.
template void linear_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void linear_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&);
template void linear_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
template void linear_nt_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void linear_nt_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void linear_nt_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&);
template void linear_nt_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&);
template void embedding_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void embedding_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void embedding_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void embedding_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void position_embedding_backward<float>(Tensor&, const Tensor&);
template void position_embedding_backward<double>(Tensor&, const Tensor&);
template void token_embedding_backward<float>(Tensor&, const Tensor&, const Tensor&);
template void token_embedding_backward<double>(Tensor&, const Tensor&, const Tensor&);
template void token_embedding_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void token_embedding_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void layernorm_forward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, double);
template void layernorm_forward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, double);
template void layernorm_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Tensor&, const Tensor&);
template void layernorm_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, const Tensor&, const Tensor&);
template void rmsnorm_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&, double);
template void rmsnorm_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
template void rmsnorm_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&);
#define KIRI_RESIDUAL_NORMS(T)                                                                   \
  template void residual_layernorm_forward<T>(Tensor&, Tensor&, Tensor&, Tensor&, const Tensor&, \
                                              const Tensor&, const Tensor&, const Tensor&,       \
                                              double);                                           \
  template void layernorm_backward_residual<T>(Tensor&, const Tensor&, const Tensor&, Tensor&,   \
                                               Tensor&, const Tensor&, const Tensor&,            \
                                               const Tensor&, const Tensor&, const Tensor&);     \
  template void residual_rmsnorm_forward<T>(Tensor&, Tensor&, Tensor&, const Tensor&,            \
                                            const Tensor&, const Tensor&, double);               \
  template void rmsnorm_backward_residual<T>(Tensor&, const Tensor&, const Tensor&, Tensor&,     \
                                             const Tensor&, const Tensor&, const Tensor&,        \
                                             const Tensor&);
KIRI_RESIDUAL_NORMS(float)
KIRI_RESIDUAL_NORMS(double)
#undef KIRI_RESIDUAL_NORMS
template void gelu_forward<float>(Tensor&, const Tensor&);
template void gelu_forward<double>(Tensor&, const Tensor&);
template void gelu_backward<float>(Tensor&, const Tensor&, const Tensor&);
template void gelu_backward<double>(Tensor&, const Tensor&, const Tensor&);
template void gelu_backward_bias<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void gelu_backward_bias<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void swiglu_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void swiglu_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void swiglu_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void swiglu_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&);
template void rope_table<float>(Tensor&, Tensor&, const std::vector<double>&);
template void rope_table<double>(Tensor&, Tensor&, const std::vector<double>&);
template void rope_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void residual_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void residual_forward<double>(Tensor&, const Tensor&, const Tensor&);
template void residual_backward<float>(Tensor&, Tensor&, const Tensor&);
template void residual_backward<double>(Tensor&, Tensor&, const Tensor&);
template void attention_forward<float>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_forward<double>(Tensor&, Tensor&, const Tensor&, int, Tensor&);
template void attention_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, int, Tensor&);
template void attention_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Tensor&, int, Tensor&);
template void gqa_attention_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, int, int, Tensor&);
template void gqa_attention_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, int, int, Tensor&);
template void gqa_attention_backward<float>(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, const Tensor&, const Tensor&,
                                            const Tensor&, int, int, Tensor&);
template void gqa_attention_backward<double>(Tensor&, Tensor&, Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, const Tensor&,
                                             const Tensor&, const Tensor&, int, int, Tensor&);
template void softmax_xent_forward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_forward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void softmax_xent_forward_backward<float>(Tensor&, Tensor&, Tensor&, Tensor&,
                                                   const Tensor&, const Tensor&);
template void softmax_xent_forward_backward<double>(Tensor&, Tensor&, Tensor&, Tensor&,
                                                    const Tensor&, const Tensor&);

}  // namespace kiri::kernels
