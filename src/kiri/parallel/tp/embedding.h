#pragma once
// Vocab-parallel token embedding (Megatron-LM's VocabParallelEmbedding).
//
// The token table wte [V, C] (V the padded vocabulary, V = P * V/P over the
// P tp ranks) is split by rows: rank r holds wte_r = wte[s_r : s_r + V/P]
// with s_r = r * V/P (vocab_range()). For tokens t_i:
//
//   forward   out_i = sum_r [s_r <= t_i < s_r + V/P] * wte_r[t_i - s_r]
//                   = wte[t_i]
//             each rank writes its rows (zeros for tokens it does not own),
//             then one all-reduce sum over tp (mapping g); exactly one term
//             of each sum is non-zero, so out is wte[t] bit for bit.
//   backward  dwte_r[t_i - s_r] += dout_i   for the i with t_i in rank r's
//             rows; dout is the same on every rank (g's backward is the
//             identity), so there is no communication.
//
// The positional embedding is added by the caller (it is not split).
#include <cstdint>

#include "kiri/comm/communicator.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel::tp {

// out [B,T,C] F32 = wte[tokens]; tokens [B,T] I32 in [0, P * V/P);
// wte_local [V/P, C] F32, BF16 or F16 (read as fp32) holding rows
// [vocab_start, vocab_start + V/P), vocab_start = tp.rank() * V/P.
// Collective over tp: one all-reduce of out.
void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& out, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start);
// Sequence parallel (Megatron's VocabParallelEmbedding with --sequence-parallel): the sum is
// reduce-scattered instead (ReduceScatterToSequence::forward), local [N/P, C] = block
// tp.rank() of the rows of wte[tokens]; full [B,T,C] F32 is the lookup's scratch. Its backward
// takes the rows' gradient all-gathered (the reduce-scatter's backward) and is the one above.
void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& full, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start, Tensor& local);

// dwte_local [V/P, C] (F32, BF16 or F16) row tokens[i] - vocab_start +=
// dout[i] for dout [N, C] F32 and tokens (N elements, I32) in
// [vocab_start, vocab_start + V/P), other rows of dout skipped. Accumulates,
// in order of i, with the rounding of kernels::token_embedding_backward<float>
// (a 16-bit row is widened, added to in fp32 and rounded at each addition),
// so the slices of P ranks are bitwise the slices of the one-process result.
// Local: no communication.
void vocab_parallel_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                       int64_t vocab_start);

}  // namespace kiri::parallel::tp
