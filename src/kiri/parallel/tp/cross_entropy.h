#pragma once
// Vocab-parallel softmax cross-entropy (Megatron-LM's
// vocab_parallel_cross_entropy): the loss of logits split by vocabulary
// columns over the P tp ranks, without the full [N, V] logits on any rank.
//
// Rank r holds x_r = logits[:, s_r : s_r + V/P] (V the padded vocabulary,
// s_r = r * V/P, the columns of the output embedding rows it holds). Columns
// j >= vocab_size (padding) count as -inf: no probability, no gradient. For
// row i with target t_i:
//
//   forward   m_i   = max_r max_j x_r[i, j]                 all-reduce max
//             z_i   = x_r[i, t_i - s_r] on the owning rank,
//                     0 elsewhere, summed                   all-reduce sum
//             S_i   = sum_r sum_j exp(x_r[i, j] - m_i)      all-reduce sum
//             lse_i = m_i + log S_i,   loss_i = lse_i - z_i (0 when t_i < 0)
//   backward  dx_r[i, j] = (exp(x_r[i, j] - lse_i) - [s_r + j == t_i]) * dloss_i
//             local: lse and dloss are the same on every rank.
//
// Per call the forward makes exactly three all-reduces, each over all N rows
// (the target and max ones in flight together, then the sum of exp), so its
// communication is 3 N numbers whatever V is. losses and lse come out the
// same on every rank and equal kernels::softmax_xent_forward on the full,
// unpadded logits (to ~1e-6 relative; S is summed in double across ranks),
// and each rank's dlogits is its slice of kernels::softmax_xent_backward.
#include <cstdint>

#include "kiri/comm/communicator.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel::tp {

// logits_local [N, V/P] F32 (columns [vocab_start, vocab_start + V/P) of the
// padded vocabulary, vocab_start = tp.rank() * V/P); targets [N] I32 in
// [0, vocab_size) or < 0 (ignored: loss 0); vocab_size <= P * V/P is the real
// vocabulary. losses [N], lse [N] F32 are written (lse saved for backward).
// scratch: the allocator of the [N] F64 sum-of-exp buffer (category buffers).
// Collective over tp.
void vocab_parallel_cross_entropy_forward(comm::Communicator& tp, Tensor& losses, Tensor& lse,
                                          const Tensor& logits_local, const Tensor& targets,
                                          int64_t vocab_start, int64_t vocab_size,
                                          Allocator& scratch);

// Overwrites logits_local [N, V/P] in place with its dlogits (formula above;
// padding columns and ignored rows get 0). lse [N] from the forward, dloss [N]
// F32. Local: no communication.
void vocab_parallel_cross_entropy_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                                           const Tensor& targets, const Tensor& dloss,
                                           int64_t vocab_start, int64_t vocab_size);

}  // namespace kiri::parallel::tp
