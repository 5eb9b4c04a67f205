#pragma once
// The kernels' front, device-neutral: every layer above kernels/ calls these and nothing
// under kernels/cpu/. Each op takes the tensors (or, for the raw GEMMs, the pointers) the
// caller has and dispatches on the tensors' device (ops.cpp): kHost and kChecked are host
// memory and go to the CPU backend (kernels/cpu, namespace kernels::cpu); another device
// is an error naming it until its backend folder exists.
//
// Each op is a <op>_forward / <op>_backward pair on tensor views, templated on the scalar
// (float for training, double for the finite-difference gradient checks). Conventions, as
// in llm.c:
//  - shapes are read from the tensors and checked; the comment on each
//    argument gives the shape (N = number of rows, e.g. B*T);
//  - every backward ACCUMULATES (+=) into its d-prefixed outputs, so the
//    caller zeroes gradients once per step and several uses of one tensor
//    simply add up;
//  - OpenMP threads follow OMP_NUM_THREADS; results are deterministic for a
//    fixed thread count (static schedules, no atomics on floats).
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/kernels/params.h"
#include "kiri/tensor/tensor.h"

namespace kiri::kernels {

// ---- GEMM (row-major, BLAS semantics) ------------------------------------
// C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C, op = transpose if trans_*.
// float goes to oneDNN's sgemm, double to kiri's own loop (gradient checks).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// ---- Mixed-precision GEMM ---------------------------------------------------
// C[M,N] = alpha * op(A) @ op(B) + beta * C as above, with A and B raw 16-bit
// values of dtype `ab` (kBF16 or kF16), C of dtype kF32 or `ab`; accumulation
// is fp32 and a 16-bit C is rounded once, at the end. Deterministic for a
// fixed thread count. See LowpGemmImpl for how it is computed.
void gemm_lowp(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc);
// kOneDnnMatmul: a cached oneDNN matmul primitive on the 16-bit data (falls
// back to kViaF32 when oneDNN has no kernel for the dtype on this CPU).
// kViaF32: A and B widened to fp32 in panels (thread-local scratch of at most
// ~32 MB per thread) and gemm<float>; with several OpenMP threads and enough C
// blocks, each thread widens and multiplies whole blocks of C.
// kPacked: A and B widened as they are packed for kiri's own fp32 AVX-512
// micro-kernel (kernels/cpu/gemm_packed.cpp): no separate widening pass, and
// bitwise the same result on any thread count. It takes a shape when one
// operand (or, for an fp32 C, a K block of A) packs in 4 MiB of fp32, else it
// falls back to kViaF32, as it does in a build without AVX-512.
// kAuto: the path measured fastest on the GEMM's shape class (below): which one
// wins depends on the CPU, not on its ISA's name (vdpbf16ps runs at the fp32
// FMA's rate on some CPUs and at a quarter of it on others; AMX is faster
// still). (LowpGemmImpl and the rate types live in params.h, shared with the
// backends.)
// The setting is global to the process. Until set_gemm_lowp_impl is called it
// comes from the environment variable KIRI_GEMM_LOWP (auto | onednn |
// via_f32 | packed; unset or empty means auto), read once; any other value makes
// gemm_lowp_impl (and so every gemm_lowp) raise a kConfig error naming it.
// Forcing a path is for tests and benchmarks.
void set_gemm_lowp_impl(LowpGemmImpl impl);
LowpGemmImpl gemm_lowp_impl();
// "auto", "onednn", "via_f32", "packed", and back (kConfig error naming the value).
const char* gemm_lowp_impl_name(LowpGemmImpl impl);
LowpGemmImpl parse_gemm_lowp_impl(const std::string& name);
// Whether `impl` can compute a gemm_lowp with A and B of dtype `ab` (kBF16 or
// kF16) on this CPU without falling back: kViaF32 and kAuto always;
// kOneDnnMatmul when oneDNN has a matmul kernel for the dtype here; kPacked in
// a build with AVX-512 (for the shapes it takes).
bool gemm_lowp_available(LowpGemmImpl impl, DType ab);
// oneDNN's name for its bf16 / f16 matmul kernel on this CPU (e.g.
// "brg:avx512_core_amx_bf16" for a 256^3 product), "" when it has none.
const std::string& gemm_lowp_onednn_kernel(DType ab);
// The path gemm_lowp takes now for `ab`: the setting with kAuto and the
// fallback resolved (kOneDnnMatmul, kViaF32 or kPacked, never kAuto): under
// kAuto the path of most of the measured table's FLOPs.
LowpGemmImpl gemm_lowp_path(DType ab);
// The same for reports: "via_f32", "packed" or "onednn (<oneDNN's kernel name>)", and
// under kAuto how many of the table's shapes each path takes when they differ.
std::string gemm_lowp_path_description(DType ab);

// ---- kAuto's measured choice -------------------------------------------------
// The paths are timed on a table of shapes, and a GEMM takes the fastest path of its
// shape class: the table's shape with the same transposes nearest in log size (M, N, K).
// The table is the one set_gemm_lowp_rates installed (a training run's own shapes), else a
// default one (a 256-row batch through a 256 -> 1024 layer) measured on first use per
// thread count.
// The forward, dinput and dweight GEMMs of a linear layer with `in` and `out` features on
// `tokens` rows (out_in: nn.Linear's [out, in] weight, else Conv1D's [in, out]), named
// "<name> forward" and so on.
std::vector<LowpGemmShape> linear_gemm_shapes(int64_t tokens, int64_t in, int64_t out, bool out_in,
                                              const std::string& name);
// Where rates are kept: $KIRI_GEMM_LOWP_CACHE (a file; "off": nowhere), else
// ${XDG_CACHE_HOME:-$HOME/.cache}/kiri/gemm_lowp-<hash of the CPU model and oneDNN
// version>.txt. "" when nowhere.
std::string gemm_lowp_cache_path();
// The paths' rates on `shapes` at this thread count: from the cache file where it has
// them, the rest timed now (about 50 ms per small shape, a few calls of a large one) and
// added to the file. A damaged line is measured again; a file that cannot be written
// leaves cache_file "" and the reason in cache_note.
LowpGemmRates measure_gemm_lowp_rates(DType ab, const std::vector<LowpGemmShape>& shapes);
// Installs `rates` as kAuto's table for its dtype (at any thread count) in this process.
void set_gemm_lowp_rates(const LowpGemmRates& rates);
// Forgets every installed and default table (tests).
void clear_gemm_lowp_rates();
// kAuto's table for ab now (the default one is measured here if none is yet).
LowpGemmRates gemm_lowp_rates(DType ab);
// While `into` is set, every gemm_lowp call of the process (any thread) is appended to it,
// in call order per thread; nullptr stops. One recorder at a time. For tests and benchmarks
// that check which 16-bit GEMMs a step calls (bench::step_linear_gemms).
void record_gemm_lowp_calls(std::vector<LowpGemmCall>* into);
// gemm_lowp with bf16 A and B and an fp32 C (the original groundwork API).
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// ---- Precision conversions ---------------------------------------------------
// dst = src converted (F32, BF16, F16 either way; same numel, contiguous),
// rounding to nearest even exactly as float_to_bf16 / float_to_half.
void convert(Tensor& dst, const Tensor& src);
// dst (F32, BF16 or F16) = round(dst + src), src F32 of the same numel: adds
// an fp32 gradient into a 16-bit one, rounding once per element.
void add_into(Tensor& dst, const Tensor& src);
// No inf or NaN in x (F32, BF16 or F16): the loss-scaling overflow check.
bool all_finite(const Tensor& x);

// ---- Linear (Hugging Face Conv1D layout: weight is [in, out]) --------------
// out[N,OC] = inp[N,IC] @ weight[IC,OC] + bias[OC]   (bias may be undefined)
template <typename T>
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor& bias);
// dinp[N,IC] += dout @ weight^T; dweight[IC,OC] += inp^T @ dout; dbias[OC] += sum_rows(dout).
// dinp may be undefined (not needed), dbias undefined when there is no bias.
template <typename T>
void linear_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight);

// Mixed precision: 16-bit (BF16 or F16) inputs, weights and weight gradients,
// fp32 activations out and gradients in. out[N,OC] = inp @ weight + bias.
void linear_forward_lowp(Tensor& out /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                         const Tensor& weight /*[IC,OC] lowp*/,
                         const Tensor& bias /*[OC] lowp or undefined*/);
// dout is rounded to the weights' dtype once (a kBuffers tensor from scratch)
// and used by both GEMMs; dweight += inp^T @ dout rounds once per element;
// dbias += column sums of dout taken in fp32. dout may instead come already in the
// weights' dtype (a fused kernel rounded it): used as it is, dbias then undefined.
void linear_backward_lowp(Tensor& dinp /*[N,IC] F32, +=; may be undefined*/,
                          Tensor& dweight /*[IC,OC] lowp, +=*/,
                          Tensor& dbias /*[OC] lowp, +=; may be undefined*/,
                          const Tensor& dout /*[N,OC] F32 or lowp*/,
                          const Tensor& inp /*[N,IC] lowp*/, const Tensor& weight /*[IC,OC] lowp*/,
                          Allocator& scratch);

// ---- Linear in nn.Linear's layout (weight [out, in], no bias): Llama's ------
// out[N,OC] = inp[N,IC] @ weight[OC,IC]^T
template <typename T>
void linear_nt_forward(Tensor& out, const Tensor& inp, const Tensor& weight);
// dinp[N,IC] += dout @ weight (dinp may be undefined); dweight[OC,IC] += dout^T @ inp.
template <typename T>
void linear_nt_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight);
// Mixed precision, as linear_forward_lowp / linear_backward_lowp.
void linear_nt_forward_lowp(Tensor& out /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                            const Tensor& weight /*[OC,IC] lowp*/);
void linear_nt_backward_lowp(Tensor& dinp /*[N,IC] F32, +=; may be undefined*/,
                             Tensor& dweight /*[OC,IC] lowp, +=*/,
                             const Tensor& dout /*[N,OC] F32*/, const Tensor& inp /*[N,IC] lowp*/,
                             const Tensor& weight /*[OC,IC] lowp*/, Allocator& scratch);

// ---- Embedding: out[B,T,C] = wte[tokens[b,t]] + wpe[t] ----------------------
// tokens [B,T] I32 in [0, V); wte [V,C]; wpe [maxT,C] with T <= maxT.
// For T = float, wte/wpe (forward) and dwte/dwpe (the two halves of backward)
// may also be BF16 or F16: read as fp32, and a 16-bit gradient row is read,
// added to in fp32, rounded and written back; out and dout stay F32.
template <typename T>
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
template <typename T>
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens);
// The two halves of embedding_backward. Data parallelism sends (tokens, dout)
// rows instead of the V x C token-embedding gradient, so it keeps them apart.
// dwpe [maxT,C] += sum over b of dout [B,T,C].
template <typename T>
void position_embedding_backward(Tensor& dwpe, const Tensor& dout);
// dwte [V,C] row tokens[i] += dout[i] for dout [M,C], tokens [M] I32, in order of i.
template <typename T>
void token_embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& tokens);
// Token embedding alone (Llama has no position table): out[M,C] = wte[tokens[i]]
// for tokens of M elements (any shape) I32 in [0, V); out may be [B,T,C].
// For T = float, wte may also be BF16 or F16 (read as fp32).
template <typename T>
void token_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte);

// ---- LayerNorm over the last dimension --------------------------------------
// out[N,C], mean[N], rstd[N] (saved for backward), inp[N,C], weight[C], bias[C].
template <typename T>
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp,
                       const Tensor& weight, const Tensor& bias, double eps = 1e-5);
template <typename T>
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout,
                        const Tensor& inp, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd);

// ---- RMSNorm over the last dimension (Llama's) ------------------------------
// out[N,C] = inp * rstd * weight, rstd[N] = 1 / sqrt(mean(inp^2) + eps) (saved).
template <typename T>
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                     double eps);
// dinp[N,C] += rstd * (w*g - xhat * mean(w*g*xhat)), xhat = inp * rstd (dinp may be
// undefined); dweight[C] += sum over rows of g * xhat.
template <typename T>
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp,
                      const Tensor& weight, const Tensor& rstd);

// ---- A residual add fused into the norm that reads its sum ---------------------
// A block's x1 = x + attn(norm_1(x)) followed by norm_2(x1), each row added and normalized in one
// visit, and in backward the norm's input gradient added to the residual stream's gradient in
// the same pass. Every float is computed as by the unfused ops, in the same order (bitwise).
// sum = a + b (residual_forward), then out, mean, rstd = layernorm_forward(sum).
template <typename T>
void residual_layernorm_forward(Tensor& sum, Tensor& out, Tensor& mean, Tensor& rstd,
                                const Tensor& a, const Tensor& b, const Tensor& weight,
                                const Tensor& bias, double eps = 1e-5);
// dinp = dbase + LayerNorm's input gradient for dout, then + dskip when defined (dinp may be
// dbase: layernorm_backward, then residual_forward(dinp, dinp, dskip)); dinp [N,C] is written,
// not read, when it is not dbase. dweight, dbias += as in layernorm_backward.
template <typename T>
void layernorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                                 Tensor& dweight, Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& weight, const Tensor& mean,
                                 const Tensor& rstd);
// sum = a + b, then out, rstd = rmsnorm_forward(sum).
template <typename T>
void residual_rmsnorm_forward(Tensor& sum, Tensor& out, Tensor& rstd, const Tensor& a,
                              const Tensor& b, const Tensor& weight, double eps);
// dinp = dbase + RMSNorm's input gradient for dout, then + dskip when defined (as above);
// dweight += as in rmsnorm_backward.
template <typename T>
void rmsnorm_backward_residual(Tensor& dinp, const Tensor& dbase, const Tensor& dskip,
                               Tensor& dweight, const Tensor& dout, const Tensor& inp,
                               const Tensor& weight, const Tensor& rstd);

// ---- GELU, tanh approximation (GPT-2's) -------------------------------------
// out = GELU(inp), of inp's shape. For T = float out may also be BF16 or F16: the GELU
// rounded once into it (bitwise as gelu_forward into F32, then convert), for a 16-bit GEMM
// that reads it next, without the fp32 copy.
template <typename T>
void gelu_forward(Tensor& out, const Tensor& inp);
// dinp += GELU'(inp) * dout (all the same shape).
template <typename T>
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout);
// GELU's backward fused with the bias gradient of the linear layer before it (c_fc in GPT-2's
// MLP), in one pass: dinp [N,C] = GELU'(inp) * dout, OVERWRITTEN (not accumulated: it is the
// fresh gradient that layer's GEMMs take), and dbias [C] += its column sums (in double over
// the rows in order, as linear_backward's). For T = float dinp may be BF16 or F16: rounded
// once into it, the sums taken over the fp32 values (as linear_backward_lowp takes them).
// Bitwise equal to gelu_backward into zeros, the column sums, then convert.
template <typename T>
void gelu_backward_bias(Tensor& dinp /*[N,C] T, or 16-bit for float*/, Tensor& dbias /*[C], +=*/,
                        const Tensor& inp /*[N,C]*/, const Tensor& dout /*[N,C]*/);

// ---- SwiGLU (Llama's MLP gate): out = silu(gate) * up, silu(g) = g sigmoid(g) ----
// out, gate, up: the same shape [N, I].
template <typename T>
void swiglu_forward(Tensor& out, const Tensor& gate, const Tensor& up);
// dgate += dout * up * silu'(gate); dup += dout * silu(gate).
template <typename T>
void swiglu_backward(Tensor& dgate, Tensor& dup, const Tensor& gate, const Tensor& up,
                     const Tensor& dout);

// ---- Rotary position embedding, Hugging Face's rotate-half form ------------
// In each head of hs = 2h columns, column i < h pairs with column i + h and the
// pair turns by the angle pos * inv_freq[i] (pos = the row's position in its
// sequence):  out[i] = x[i] cos - x[i+h] sin,  out[i+h] = x[i+h] cos + x[i] sin.
// This is what HF checkpoints' q/k weights expect (Meta's files pair columns
// 2i, 2i+1 instead: their rows are permuted on conversion).
// inv_freq[i] = theta^(-2i / hs) for i < hs / 2, then scaled as `p` says (in double).
std::vector<double> rope_inv_freq(int64_t head_dim, const RopeParams& p);
// cos, sin [P, h] of T's dtype: cos(t * inv_freq[i]) and sin(...) for positions
// t < P, h = inv_freq.size(), evaluated in double.
template <typename T>
void rope_table(Tensor& cos, Tensor& sin, const std::vector<double>& inv_freq);
// out, inp [B, T, H*hs] (out may be inp); cos, sin [P, hs/2] with P >= T.
template <typename T>
void rope_forward(Tensor& out, const Tensor& inp, const Tensor& cos, const Tensor& sin);
// dinp [B, T, H*hs] += the inverse rotation of dout.
template <typename T>
void rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& cos, const Tensor& sin);

// ---- Residual: out = a + b ---------------------------------------------------
template <typename T>
void residual_forward(Tensor& out, const Tensor& a, const Tensor& b);
template <typename T>
void residual_backward(Tensor& da, Tensor& db, const Tensor& dout);

// ---- Causal self-attention -------------------------------------------------
// qkv [B,T,3C] (q, k, v each [B,T,C], head h at columns h*hs..(h+1)*hs),
// out [B,T,C], lse [B,H,T] (row log-sum-exp of the scaled scores, saved for
// backward). Works one (batch, head) at a time per thread, so it never holds a
// T x T matrix for the whole batch; backward recomputes the probabilities from
// q, k and lse (as FlashAttention does). scratch: a buffer of at least
// attention_scratch_numel(T, threads) elements of T's dtype.
int64_t attention_scratch_numel(int64_t T, int threads);
template <typename T>
void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int n_head, Tensor& scratch);
// dqkv [B,T,3C] += gradient; dout [B,T,C].
template <typename T>
void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Tensor& scratch);
// Grouped-query attention (Llama's): q [B,T,NH*hs], k and v [B,T,NKV*hs] with
// NKV dividing NH; query head h attends with key/value head h / (NH / NKV)
// (NKV = NH: multi-head, NKV = 1: multi-query). out [B,T,NH*hs], lse [B,NH,T].
// scratch as above.
template <typename T>
void gqa_attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int n_head, int n_kv_head, Tensor& scratch);
// dq += ..., and dk, dv += the sum over each key/value head's query heads.
template <typename T>
void gqa_attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                            int n_head, int n_kv_head, Tensor& scratch);

// ---- Fused softmax + cross-entropy over the vocabulary ----------------------
// logits [N,V], targets [N] I32 (a target < 0 is ignored: loss 0, gradient 0).
// losses [N] = logsumexp(logits[i]) - logits[i, target[i]]; lse [N] saved.
template <typename T>
void softmax_xent_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets);
// Overwrites logits in place with dlogits[i] = (softmax(logits[i]) - onehot) * dloss[i]:
// the logits are not needed after this, and the V-wide buffer is the biggest one.
template <typename T>
void softmax_xent_backward(Tensor& logits_to_dlogits, const Tensor& lse, const Tensor& targets,
                           const Tensor& dloss);
// Both at once, for training (dloss known when the loss is computed): losses and lse as
// softmax_xent_forward, and the gradient as softmax_xent_backward computed on each row while
// it is still in cache, so the [N, V] logits are read from memory once instead of three
// times. Bitwise equal to the pair (the same operations per row). dlogits undefined: logits
// are overwritten with the gradient (as softmax_xent_backward). For T = float dlogits may
// instead be BF16 or F16 [N, V]: the gradient rounded into it, bitwise as convert() of the
// pair's result, and logits left holding the fp32 gradient.
template <typename T>
void softmax_xent_forward_backward(Tensor& losses /*[N]*/, Tensor& lse /*[N]*/,
                                   Tensor& logits /*[N,V] in; fp32 gradient out*/,
                                   Tensor& dlogits /*[N,V] 16-bit out, or undefined*/,
                                   const Tensor& targets /*[N] I32*/, const Tensor& dloss /*[N]*/);

// ---- AdamW (fp32 states) ---------------------------------------------------
// param, m, v: same numel, F32 (param is the fp32 master copy). grad: same
// numel, F32, BF16 or F16 (widened on the fly). lowp_param, when given: BF16
// or F16 of the same numel, set to the updated param rounded (the copy the
// forward pass reads). p.zero_grad: grad is set to 0 after it is read (grad is a
// handle: its elements are written though the handle is const).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                  Tensor* lowp_param = nullptr);

// Sum of squares of the elements (F32, F64, BF16 or F16), accumulated in
// double (for grad-norm clipping).
double sum_of_squares(const Tensor& x);

// ---- Vocabulary-parallel pieces (tensor parallelism, parallel/tp) -------------
// A rank holds a slice of the vocabulary: `logits_local` [N, cols] F32 whose first `real`
// columns are real (the rest padding) and start at vocabulary index `start`; targets and
// tokens are I32. parallel/tp checks the arguments and runs the collectives between these.
// max[N] = the row max over the real columns (-inf when none); target_logit[N] = the
// target's logit where this slice holds it (targets < 0 and others: 0). Both F32.
void vocab_slice_max_and_target(Tensor& max, Tensor& target_logit, const Tensor& logits_local,
                                const Tensor& targets, int64_t real, int64_t start);
// sum[N] (F64) = sum over the real columns of exp(logits - max[i]).
void vocab_slice_sum_exp(Tensor& sum, const Tensor& logits_local, const Tensor& max, int64_t real);
// With the reduced max in lse and target logit in losses: lse[i] = max + log(sum[i]),
// losses[i] = lse[i] - target logit (0 where the target is < 0).
void vocab_slice_finish_loss(Tensor& losses, Tensor& lse, const Tensor& sum, const Tensor& targets);
// logits_to_dlogits_local [N, cols] overwritten with (softmax - onehot) * dloss[i] on the
// real columns, 0 on the padding and on rows whose target is < 0.
void vocab_slice_xent_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                               const Tensor& targets, const Tensor& dloss, int64_t real,
                               int64_t start);
// rows [n, C] F32 = wte_local [Vl, C] (F32, BF16 or F16) row tokens[i] - start, widened;
// zeros for tokens outside the slice (n = tokens.numel()).
void vocab_slice_embedding_lookup(Tensor& rows, const Tensor& tokens, const Tensor& wte_local,
                                  int64_t start);
// dwte_local [Vl, C] row tokens[i] - start += dout [M, C] row i for the tokens in the
// slice, in order of i (a 16-bit row rounded once per addition).
void vocab_slice_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                    int64_t start);

// ---- Small row ops (model/gpt) ------------------------------------------------
// The sum of x's elements (T's dtype) in order, accumulated in double: the mean loss.
template <typename T>
double sum_in_order(const Tensor& x);
// rows [n, C] F32 += row (first + i) % seq of pos_table [>= seq, C] F32, for each row i:
// the position embedding of a sequence shard whose first row is at position `first`.
void add_position_rows(Tensor& rows, const Tensor& pos_table, int64_t first, int64_t seq);

}  // namespace kiri::kernels
