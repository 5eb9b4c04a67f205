#include "kiri/parallel/tp/vocab_parallel.h"

#include <type_traits>

#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"
#include "kiri/parallel/tp/cross_entropy.h"
#include "kiri/parallel/tp/embedding.h"
#include "kiri/parallel/tp/mappings.h"
#include "kiri/parallel/tp/utils.h"

namespace kiri::parallel::tp {

namespace k = kiri::kernels;

namespace {
// The vocab-parallel kernels (embedding.h, cross_entropy.h) are fp32; the double model (the
// finite-difference reference) runs on one rank.
template <typename T>
void check_float(const TensorParallel& tp) {
  constexpr bool fp32 = std::is_same_v<T, float>;
  KIRI_CHECK(fp32 || !tp.on(), "tensor parallelism runs in fp32 only");
}
}  // namespace

VocabRows vocab_rows(const TensorParallel& tp, int64_t vocab_size) {
  if (!tp.on()) return {vocab_size, 0, {}};
  const int p = tp.size();
  const int64_t rows = pad_vocab(vocab_size, p) / p;
  return {rows, rows * tp.rank(), nn::TpSplit{0, p, tp.rank(), 1}};
}

template <typename T>
Tensor VocabParallelEmbedding<T>::forward(nn::Context& ctx, const Tensor& tokens, const Tensor& wte,
                                          const Tensor& wpe) {
  const int64_t b = tokens.dim(0), t = tokens.dim(1), c = wte.dim(1);
  Tensor x = nn::activation(ctx, {b, t, c}, dtype_of<T>());  // [B, T, C]
  if (!tp_.on()) {
    if (wpe.defined())
      k::embedding_forward<T>(x, tokens, wte, wpe);
    else
      k::token_embedding_forward<T>(x, tokens, wte);
    return x.view({b * t, c});
  }
  check_float<T>(tp_);
  // Each rank looks up its rows, one collective sums them; then + wpe.
  Tensor rows = x.view({b * t, c});  // [N, C]
  int64_t first = 0;                 // the micro-batch's row that rows[0] is
  if (tp_.split_sequence()) {
    rows = nn::activation(ctx, {tp_.local_rows(b * t), c}, DType::kF32);  // [N/P, C]
    vocab_parallel_embedding_forward(*tp_.group, x, tokens, wte, vocab_start_, rows);
    first = rows.dim(0) * tp_.rank();
  } else {
    vocab_parallel_embedding_forward(*tp_.group, x, tokens, wte, vocab_start_);
  }
  if (wpe.defined()) add_positions(ctx, rows, wpe, first, t);
  return rows;
}

template <typename T>
void VocabParallelEmbedding<T>::add_positions(nn::Context& ctx, Tensor& rows, const Tensor& wpe,
                                              int64_t first, int64_t seq) {
  Tensor pos = wpe;  // [block_size, C]
  if (pos.dtype() != DType::kF32) {
    pos = Tensor::empty(wpe.shape(), DType::kF32, Category::kBuffers, ctx.allocator);
    k::convert(pos, wpe);
  }
  k::add_position_rows(rows, pos, first, seq);
}

template <typename T>
Tensor VocabParallelEmbedding<T>::every_row_grad(nn::Context& ctx, const Tensor& dx, int64_t n) {
  if (!tp_.split_sequence()) return dx;
  // The embedding's reduce-scatter, backward: every row on every rank.
  Tensor full = nn::activation(ctx, {n, dx.dim(1)}, dtype_of<T>());  // [N, C]
  ReduceScatterToSequence::backward(*tp_.group, dx, full);
  return full;
}

template <typename T>
void VocabParallelEmbedding<T>::token_backward(Tensor& dwte, const Tensor& dx,
                                               const Tensor& tokens) const {
  if (!tp_.on()) {
    k::token_embedding_backward<T>(dwte, dx, tokens);
    return;
  }
  check_float<T>(tp_);
  vocab_parallel_embedding_backward(dwte, dx, tokens, vocab_start_);
}

template <typename T>
Tensor VocabParallelHead<T>::every_row(nn::Context& ctx, const Tensor& x) const {
  if (!tp_.split_sequence()) return x;
  Tensor full = nn::activation(ctx, {x.dim(0) * tp_.size(), x.dim(1)}, dtype_of<T>());  // [N, C]
  GatherFromSequence::forward(*tp_.group, x, full);
  return full;
}

template <typename T>
Tensor VocabParallelHead<T>::logits(nn::Context& ctx, const Tensor& x, const Tensor& w,
                                    Tensor* saved_x) const {
  const int64_t n = x.dim(0), c = x.dim(1), v = w.dim(0);
  Tensor out = nn::activation(ctx, {n, v}, dtype_of<T>());  // [N, V/P]
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = w.dtype();
    if (pd != DType::kF32) {  // 16-bit parameters: a 16-bit GEMM on a 16-bit copy of x
      Tensor xl = nn::activation(ctx, {n, c}, pd);  // [N, C]
      k::convert(xl, x);
      k::gemm_lowp(pd, false, true, n, v, c, 1.0f, xl.raw(), c, w.raw(), c, 0.0f, out.raw(),
                   DType::kF32, v);
      if (saved_x) *saved_x = xl;
      return out;
    }
  }
  k::gemm<T>(false, true, n, v, c, T(1), x.data<T>(), c, w.data<T>(), c, T(0), out.data<T>(), v);
  if (saved_x) *saved_x = x;
  return out;
}

template <typename T>
void VocabParallelHead<T>::loss_forward(nn::Context& ctx, Tensor& losses, Tensor& lse,
                                        const Tensor& logits, const Tensor& targets) const {
  if (!tp_.on()) {
    k::softmax_xent_forward<T>(losses, lse, logits, targets);
    return;
  }
  check_float<T>(tp_);
  // The vocab-parallel cross-entropy: 3 all-reduces of [N], no full logits.
  vocab_parallel_cross_entropy_forward(*tp_.group, losses, lse, logits, targets, vocab_start_,
                                       vocab_size_, ctx.allocator);
}

template <typename T>
void VocabParallelHead<T>::loss_backward(Tensor& logits, const Tensor& lse, const Tensor& targets,
                                         const Tensor& dloss) const {
  if (!tp_.on()) {
    k::softmax_xent_backward<T>(logits, lse, targets, dloss);
    return;
  }
  check_float<T>(tp_);
  vocab_parallel_cross_entropy_backward(logits, lse, targets, dloss, vocab_start_, vocab_size_);
}

template <typename T>
Tensor VocabParallelHead<T>::loss_forward_backward(nn::Context& ctx, Tensor& losses, Tensor& lse,
                                                   Tensor logits, const Tensor& targets,
                                                   const Tensor& dloss, DType lowp) const {
  KIRI_CHECK_KIND(kInternal, one_pass_loss(),
                  "the one-pass loss needs the whole vocabulary on one rank, not tp ", tp_.size());
  Tensor dl16;  // [N, V] 16-bit under mixed precision
  if (std::is_same_v<T, float> && lowp != dtype_of<T>())
    dl16 = nn::activation(ctx, logits.shape(), lowp);
  k::softmax_xent_forward_backward<T>(losses, lse, logits, dl16, targets, dloss);
  return dl16.defined() ? dl16 : logits;
}

template <typename T>
void VocabParallelHead<T>::logits_backward(nn::Context& ctx, Tensor dlogits, const Tensor& x,
                                           nn::Parameter& w, Tensor& dx) const {
  // logits = x @ w^T: dx += dlogits @ w; dw += dlogits^T @ x
  const int64_t n = dlogits.dim(0), v = dlogits.dim(1), c = x.dim(1);
  if constexpr (std::is_same_v<T, float>) {
    const DType pd = x.dtype();
    if (pd != DType::kF32) {
      Tensor dl = dlogits;  // [N, V/P] 16-bit copy of dlogits
      if (dlogits.dtype() != pd) {
        dl = nn::activation(ctx, {n, v}, pd);
        k::convert(dl, dlogits);
      }
      dlogits = Tensor();  // the fp32 [N, V/P] is the largest buffer: free it before the GEMMs
      k::gemm_lowp(pd, false, false, n, c, v, 1.0f, dl.raw(), v, w.value.raw(), c, 1.0f, dx.raw(),
                   DType::kF32, c);
      ctx.progress();
      k::gemm_lowp(pd, true, false, v, c, n, 1.0f, dl.raw(), v, x.raw(), c, 1.0f, w.grad.raw(), pd,
                   c);
      return;
    }
  }
  k::gemm<T>(false, false, n, c, v, T(1), dlogits.data<T>(), v, w.value.data<T>(), c, T(1),
             dx.data<T>(), c);
  ctx.progress();
  k::gemm<T>(true, false, v, c, n, T(1), dlogits.data<T>(), v, x.data<T>(), c, T(1),
             w.grad.data<T>(), c);
}

template <typename T>
Tensor VocabParallelHead<T>::input_grad(nn::Context& ctx, Tensor dx) const {
  if (tp_.split_sequence()) {
    Tensor local =
        nn::activation(ctx, {tp_.local_rows(dx.dim(0)), dx.dim(1)}, dtype_of<T>());  // [N/P, C]
    GatherFromSequence::backward(*tp_.group, dx, local);
    return local;
  }
  if (tp_.on()) CopyToRegion::backward(*tp_.group, dx);
  return dx;
}

template class VocabParallelEmbedding<float>;
template class VocabParallelEmbedding<double>;
template class VocabParallelHead<float>;
template class VocabParallelHead<double>;

}  // namespace kiri::parallel::tp
