#pragma once
// The vocabulary's two ends under tensor parallelism, as layers the model calls without knowing
// how it is cut (Megatron's VocabParallelEmbedding, and its output layer with
// vocab_parallel_cross_entropy). Over P tp ranks both [V, C] tables are split by vocabulary
// rows, V padded to a multiple of P: rank r holds rows [s_r, s_r + V/P), s_r = r * V/P.
//
//   embedding  rows = wte[tokens] (+ wpe[positions])       embedding.h: one all-reduce
//                                                           (sequence parallel: reduce-scatter)
//   head       X = [X_0; ...; X_{P-1}]                      sequence parallel: all-gather (g)
//              logits_r = X @ w_r^T          [N, V/P]        local; the full logits never exist
//              loss = lse - logit[target]                  cross_entropy.h: 3 all-reduces of [N]
//   backward   dlogits_r local; dX = sum_r dlogits_r @ w_r  all-reduce (f's backward), or the
//                                                           reduce-scatter under sequence
//                                                           parallelism (g's backward)
//
// On one rank (P = 1, or no tp group) each is the plain layer: the softmax cross-entropy and
// the embedding kernels, no collective. The bypass is inside, as in the mappings (mappings.h),
// so that GPT has no tensor-parallel branch.
#include <cstdint>

#include "kiri/nn/layers.h"
#include "kiri/parallel/tp/layers.h"

namespace kiri::parallel::tp {

// This rank's rows of a [V, C] table cut by vocabulary rows: [start, start + rows) of the
// vocabulary padded to a multiple of P; the whole vocabulary on one rank. `cut` tells
// checkpoints and HF folders how the rank's rows sit in the full table.
struct VocabRows {
  int64_t rows = 0, start = 0;
  nn::TpSplit cut;
};
VocabRows vocab_rows(const TensorParallel& tp, int64_t vocab_size);

template <typename T>
class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding() = default;
  VocabParallelEmbedding(const TensorParallel& tp, int64_t vocab_start)
      : tp_(tp), vocab_start_(vocab_start) {}
  // tokens [B, T] I32; wte [V/P, C] (this rank's rows); wpe [block_size, C], or undefined
  // (Llama). Returns the rows of wte[tokens] (+ wpe[t]): [B*T, C], under sequence parallelism
  // this rank's [B*T/P, C].
  Tensor forward(nn::Context& ctx, const Tensor& tokens, const Tensor& wte, const Tensor& wpe);
  // The gradient of forward's rows, dx [B*T or B*T/P, C], for every row [B*T, C]: dx itself,
  // or under sequence parallelism the reduce-scatter's backward (an all-gather).
  Tensor every_row_grad(nn::Context& ctx, const Tensor& dx, int64_t n);
  // dwte [V/P, C] += dx [N, C] at rows tokens [N] I32 (the rows this rank holds; others
  // skipped). Local.
  void token_backward(Tensor& dwte, const Tensor& dx, const Tensor& tokens) const;

 private:
  // rows[i] += wpe[(first + i) % seq]: the positions of rows first, first + 1, ...
  static void add_positions(nn::Context& ctx, Tensor& rows, const Tensor& wpe, int64_t first,
                            int64_t seq);

  TensorParallel tp_;
  int64_t vocab_start_ = 0;
};

template <typename T>
class VocabParallelHead {
 public:
  VocabParallelHead() = default;
  VocabParallelHead(const TensorParallel& tp, int64_t vocab_start, int64_t vocab_size)
      : tp_(tp), vocab_start_(vocab_start), vocab_size_(vocab_size) {}
  // The final norm's output x [N, C] (sequence parallel: this rank's [N/P, C]) for every row,
  // [N, C]: the all-gather under sequence parallelism, else x.
  Tensor every_row(nn::Context& ctx, const Tensor& x) const;
  // logits [N, V/P] = x [N, C] @ w^T for w [V/P, C]. Under 16-bit parameters (T = float) the
  // GEMM is 16-bit on a 16-bit copy of x, returned in *saved_x for backward (else x itself).
  Tensor logits(nn::Context& ctx, const Tensor& x, const Tensor& w, Tensor* saved_x) const;
  // losses [N], lse [N] (T) of logits [N, V/P] and targets [N] I32 (< 0: ignored, loss 0).
  // Collective over tp (3 all-reduces of [N]).
  void loss_forward(nn::Context& ctx, Tensor& losses, Tensor& lse, const Tensor& logits,
                    const Tensor& targets) const;
  // Overwrites logits with dlogits, for dloss [N]. Local.
  void loss_backward(Tensor& logits, const Tensor& lse, const Tensor& targets,
                     const Tensor& dloss) const;
  // Whether loss_forward_backward applies: the whole vocabulary on this rank.
  bool one_pass_loss() const { return !tp_.on(); }
  // Training's loss_forward and loss_backward at once (one_pass_loss() only), each row of the
  // logits visited once (kernels::softmax_xent_forward_backward): fills losses and lse and
  // returns dlogits [N, V], the logits themselves overwritten, or under 16-bit parameters
  // (T = float, `lowp` BF16 or F16) a 16-bit copy, the fp32 logits then released.
  Tensor loss_forward_backward(nn::Context& ctx, Tensor& losses, Tensor& lse, Tensor logits,
                               const Tensor& targets, const Tensor& dloss, DType lowp) const;
  // logits = x @ w^T: dx += dlogits @ w.value; w.grad += dlogits^T @ x, with x as logits() saved
  // it. Takes dlogits by value so that the 16-bit path frees the fp32 one before its GEMMs;
  // a 16-bit dlogits (from loss_forward_backward) is used as it is.
  void logits_backward(nn::Context& ctx, Tensor dlogits, const Tensor& x, nn::Parameter& w,
                       Tensor& dx) const;
  // dx [N, C] sums over this rank's vocabulary rows only: the sum over ranks (f's backward), or
  // under sequence parallelism this rank's rows of it [N/P, C] (the all-gather's backward).
  Tensor input_grad(nn::Context& ctx, Tensor dx) const;

 private:
  TensorParallel tp_;
  int64_t vocab_start_ = 0, vocab_size_ = 0;
};

}  // namespace kiri::parallel::tp
