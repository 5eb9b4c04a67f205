#pragma once
// The CPU backend's ops: the same functions as the front (kiri/kernels/ops.h, whose
// comments say what each computes), on host memory. Only kernels/ includes this file; every
// other layer calls the front, which dispatches on the tensors' device.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/kernels/params.h"
#include "kiri/tensor/tensor.h"

namespace kiri::kernels::cpu {

// ---- GEMM (row-major, BLAS semantics) ------------------------------------
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// ---- Mixed-precision GEMM ---------------------------------------------------
void gemm_lowp(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc);
void set_gemm_lowp_impl(LowpGemmImpl impl);
LowpGemmImpl gemm_lowp_impl();
const char* gemm_lowp_impl_name(LowpGemmImpl impl);
LowpGemmImpl parse_gemm_lowp_impl(const std::string& name);
bool gemm_lowp_available(LowpGemmImpl impl, DType ab);
const std::string& gemm_lowp_onednn_kernel(DType ab);
LowpGemmImpl gemm_lowp_path(DType ab);
std::string gemm_lowp_path_description(DType ab);
std::vector<LowpGemmShape> linear_gemm_shapes(int64_t tokens, int64_t in, int64_t out, bool out_in,
                                              const std::string& name);
std::string gemm_lowp_cache_path();
LowpGemmRates measure_gemm_lowp_rates(DType ab, const std::vector<LowpGemmShape>& shapes);
void set_gemm_lowp_rates(const LowpGemmRates& rates);
void clear_gemm_lowp_rates();
LowpGemmRates gemm_lowp_rates(DType ab);
void record_gemm_lowp_calls(std::vector<LowpGemmCall>* into);
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// ---- Precision conversions ---------------------------------------------------
void convert(Tensor& dst, const Tensor& src);
void add_into(Tensor& dst, const Tensor& src);
bool all_finite(const Tensor& x);

// ---- Linear (Hugging Face Conv1D layout: weight is [in, out]) --------------
template <typename T>
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
template <typename T>
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);

void linear_forward_lowp(Tensor& out /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                         const Tensor& weight /*[IC,OC] lowp*/,
                         const Tensor& bias /*[OC] lowp or undefined*/);
void linear_backward_lowp(Tensor& dinp /*[N,IC] F32, +=; may be undefined*/,
                          Tensor& dweight /*[IC,OC] lowp, +=*/,
                          Tensor& dbias /*[OC] lowp, +=; may be undefined*/,
                          const Tensor& dout /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                          const Tensor& weight /*[IC,OC] lowp*/, Allocator& scratch);

// ---- Linear in nn.Linear's layout (weight [out, in], no bias): Llama's ------
template <typename T>
void linear_nt_forward(Tensor& out, const Tensor& inp, const Tensor& weight);
template <typename T>
void linear_nt_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight);
void linear_nt_forward_lowp(Tensor& out /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                            const Tensor& weight /*[OC,IC] lowp*/);
void linear_nt_backward_lowp(Tensor& dinp /*[N,IC] F32, +=; may be undefined*/,
                             Tensor& dweight /*[OC,IC] lowp, +=*/,
                             const Tensor& dout /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                             const Tensor& weight /*[OC,IC] lowp*/, Allocator& scratch);

// ---- Embedding: out[B,T,C] = wte[tokens[b,t]] + wpe[t] ----------------------
template <typename T>
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
template <typename T>
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens);
template <typename T>
void position_embedding_backward(Tensor& dwpe, const Tensor& dout);
template <typename T>
void token_embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& tokens);
template <typename T>
void token_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte);

// ---- LayerNorm over the last dimension --------------------------------------
template <typename T>
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps = 1e-5);
template <typename T>
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

// ---- RMSNorm over the last dimension (Llama's) ------------------------------
template <typename T>
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     double eps);
template <typename T>
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

// ---- Residual add fused into the norm that reads the sum (the block's x1 = x + attn) ----
template <typename T>
void residual_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& weight,
                                const Tensor& bias, double eps = 1e-5);
template <typename T>
void layernorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                                 Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd);
template <typename T>
void residual_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& weight, double eps);
template <typename T>
void rmsnorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                               Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd);

// ---- GELU, tanh approximation (GPT-2's) -------------------------------------
template <typename T>
void gelu_forward(Tensor& out, const Tensor& inp);
template <typename T>
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);
template <typename T>
void gelu_backward_bias(Tensor& dinp, Tensor& dbias, const Tensor& inp, const Tensor& dout);

// ---- SwiGLU (Llama's MLP gate): out = silu(gate) * up, silu(g) = g sigmoid(g) ----
template <typename T>
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
template <typename T>
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& gate, const Tensor& up,
                     const Tensor& dout);

// ---- Rotary position embedding, Hugging Face's rotate-half form ------------
std::vector<double> rope_inv_freq(int64_t head_dim, const RopeParams& p);
template <typename T>
void rope_table(Tensor& cos, Tensor& sin, const std::vector<double>& inv_freq);
template <typename T>
void rope_forward(Tensor& out, const Tensor& inp, const Tensor& cos, const Tensor& sin);
template <typename T>
void rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& cos, const Tensor& sin);

// ---- Residual: out = a + b ---------------------------------------------------
template <typename T>
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b);
template <typename T>
void residual_backward(Tensor& da, Tensor& db, const Tensor& dout);

// ---- Causal self-attention -------------------------------------------------
int64_t attention_scratch_numel(int64_t T, int threads);
template <typename T>
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, Tensor& scratch);
template <typename T>
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Tensor& scratch);
template <typename T>
void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int n_head, int n_kv_head, Tensor& scratch);
template <typename T>
void gqa_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            int n_head, int n_kv_head, Tensor& scratch);

// ---- Fused softmax + cross-entropy over the vocabulary ----------------------
template <typename T>
void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
template <typename T>
void softmax_xent_backward(Tensor& logits_to_dlogits, const Tensor& lse, const Tensor& targets,
                           const Tensor& dloss);
template <typename T>
void softmax_xent_forward_backward(Tensor& losses, Tensor& lse, Tensor& logits, Tensor& dlogits,
                                   const Tensor& targets, const Tensor& dloss);

// ---- AdamW (fp32 states) ---------------------------------------------------
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                  Tensor* lowp_param = nullptr);

double sum_of_squares(const Tensor& x);

// ---- Vocabulary-parallel pieces (tensor parallelism, parallel/tp) -------------
void vocab_slice_max_and_target(Tensor& max, Tensor& target_logit, const Tensor& logits_local,
                                const Tensor& targets, int64_t real, int64_t start);
void vocab_slice_sum_exp(Tensor& sum, const Tensor& logits_local, const Tensor& max, int64_t real);
void vocab_slice_finish_loss(Tensor& losses, Tensor& lse, const Tensor& sum, const Tensor& targets);
void vocab_slice_xent_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                               const Tensor& targets, const Tensor& dloss, int64_t real,
                               int64_t start);
void vocab_slice_embedding_lookup(Tensor& rows, const Tensor& tokens, const Tensor& wte_local,
                                  int64_t start);
void vocab_slice_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                    int64_t start);
// ---- Small row ops (model/gpt) ------------------------------------------------
template <typename T>
double sum_in_order(const Tensor& x);
void add_position_rows(Tensor& rows, const Tensor& pos_table, int64_t first, int64_t seq);
}  // namespace kiri::kernels::cpu
