#include "kiri/parallel/tp/cross_entropy.h"

#include <algorithm>

// The element loops are kernels (ops.h, vocab_slice_*); this file checks the arguments and
// runs the collectives between them.
#include "kiri/kernels/ops.h"

namespace kiri::parallel::tp {

namespace {

// The local slice: N rows of V/P columns, the first `real` of them inside
// the real vocabulary.
struct Slice {
  int64_t N, cols, real;
};

// Checks logits [N, V/P] F32, targets [N] I32 (every one, before any
// collective, so all ranks fail alike) and the vocabulary arguments.
Slice check_slice(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                  int64_t vocab_size, const char* op) {
  KIRI_CHECK(logits.dtype() == DType::kF32 && logits.rank() == 2, op,
             ": logits_local must be [N, V/tp] F32, got ", logits.shape().str(), " ",
             dtype_name(logits.dtype()));
  const int64_t N = logits.dim(0), cols = logits.dim(1);
  KIRI_CHECK(targets.dtype() == DType::kI32 && targets.numel() == N, op, ": targets ",
             targets.shape().str(), " ", dtype_name(targets.dtype()), " for ", N, " rows");
  KIRI_CHECK(cols > 0 && vocab_start >= 0 && vocab_size > 0, op, ": logits_local ",
             logits.shape().str(), ", vocab_start ", vocab_start, ", vocab_size ", vocab_size);
  const int32_t* t = targets.data<int32_t>();  // [N]
  for (int64_t i = 0; i < N; ++i)
    KIRI_CHECK(t[i] < vocab_size, op, ": target ", t[i], " at row ", i,
               " outside the vocabulary of ", vocab_size);
  return {N, cols, std::clamp<int64_t>(vocab_size - vocab_start, 0, cols)};
}

void check_row_tensor(const Tensor& t, int64_t N, const char* op, const char* name) {
  KIRI_CHECK(t.dtype() == DType::kF32 && t.numel() == N, op, ": ", name, " ", t.shape().str(), " ",
             dtype_name(t.dtype()), ", expected ", N, " F32 values");
}

}  // namespace

void vocab_parallel_cross_entropy_forward(comm::Communicator& tp, Tensor& losses, Tensor& lse,
                                          const Tensor& logits_local, const Tensor& targets,
                                          int64_t vocab_start, int64_t vocab_size,
                                          Allocator& scratch) {
  const char* op = "vocab_parallel_cross_entropy_forward";
  const Slice s = check_slice(logits_local, targets, vocab_start, vocab_size, op);
  check_row_tensor(losses, s.N, op, "losses");
  check_row_tensor(lse, s.N, op, "lse");
  KIRI_CHECK(vocab_start == tp.rank() * s.cols && vocab_size <= tp.size() * s.cols, op,
             ": vocab_start ", vocab_start, " and vocab_size ", vocab_size, " on tp rank ",
             tp.rank(), " of ", tp.size(), " with ", s.cols, " columns each, expected ",
             tp.rank() * s.cols, " and at most ", tp.size() * s.cols);
  // lse holds the max, then lse; losses the target logit, then the loss.
  kernels::vocab_slice_max_and_target(lse, losses, logits_local, targets, s.real, vocab_start);
  comm::WorkHandle target = tp.all_reduce_async(losses, comm::ReduceOp::kSum);
  comm::WorkHandle max = tp.all_reduce_async(lse, comm::ReduceOp::kMax);
  max->wait();
  target->wait();
  Tensor sum = Tensor::empty({s.N}, DType::kF64, Category::kBuffers, scratch);
  kernels::vocab_slice_sum_exp(sum, logits_local, lse, s.real);
  tp.all_reduce(sum, comm::ReduceOp::kSum);
  kernels::vocab_slice_finish_loss(losses, lse, sum, targets);
}

void vocab_parallel_cross_entropy_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                                           const Tensor& targets, const Tensor& dloss,
                                           int64_t vocab_start, int64_t vocab_size) {
  const char* op = "vocab_parallel_cross_entropy_backward";
  const Slice s = check_slice(logits_to_dlogits_local, targets, vocab_start, vocab_size, op);
  check_row_tensor(lse, s.N, op, "lse");
  check_row_tensor(dloss, s.N, op, "dloss");
  kernels::vocab_slice_xent_backward(logits_to_dlogits_local, lse, targets, dloss, s.real,
                                     vocab_start);
}

}  // namespace kiri::parallel::tp
