#include "kiri/parallel/tp/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

// exp_fast: the vectorisable expf of the one-process kernel (a libm call per element
// made this loop 28% of a tp 2 step).
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::parallel::tp {

namespace {

constexpr int64_t kMinParallelWork = 1 << 15;  // as the CPU kernels

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

// Local partials: row max over the real columns (-inf when there are none)
// and the target logit where this rank owns it (else 0).
void local_max_and_target(float* max, float* z, const float* x, const int32_t* t, const Slice& s,
                          int64_t start) {
#pragma omp parallel for schedule(static) if (s.N * s.cols > kMinParallelWork)
  for (int64_t i = 0; i < s.N; ++i) {
    const float* xi = x + i * s.cols;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < s.real; ++j) m = xi[j] > m ? xi[j] : m;
    max[i] = m;
    const int64_t j = t[i] - start;
    z[i] = t[i] >= 0 && j >= 0 && j < s.real ? xi[j] : 0.0f;
  }
}

// sum[i] = sum over the real columns of exp(x[i, j] - m[i]): float sums of
// blocks of kSumBlock terms, the block sums in double (as the kernel's row_lse).
void local_sum_exp(double* sum, const float* x, const float* m, const Slice& s) {
  constexpr int64_t kSumBlock = 1024;
#pragma omp parallel for schedule(static) if (s.N * s.cols > kMinParallelWork)
  for (int64_t i = 0; i < s.N; ++i) {
    const float* xi = x + i * s.cols;
    const float mi = m[i];
    double total = 0;
    for (int64_t b = 0; b < s.real; b += kSumBlock) {
      const int64_t e = std::min(s.real, b + kSumBlock);
      float part = 0;
#pragma omp simd reduction(+ : part)
      for (int64_t j = b; j < e; ++j) part += kernels::detail::exp_fast(xi[j] - mi);
      total += static_cast<double>(part);
    }
    sum[i] = total;
  }
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
  const float* x = logits_local.data<float>();  // [N, V/P]
  const int32_t* t = targets.data<int32_t>();   // [N]
  float* m = lse.data<float>();                 // [N]: the max, then lse
  float* z = losses.data<float>();              // [N]: the target logit, then the loss
  local_max_and_target(m, z, x, t, s, vocab_start);
  comm::WorkHandle target = tp.all_reduce_async(losses, comm::ReduceOp::kSum);
  comm::WorkHandle max = tp.all_reduce_async(lse, comm::ReduceOp::kMax);
  max->wait();
  target->wait();
  Tensor sum = Tensor::empty({s.N}, DType::kF64, Category::kBuffers, scratch);
  double* S = sum.data<double>();
  local_sum_exp(S, x, m, s);
  tp.all_reduce(sum, comm::ReduceOp::kSum);
  for (int64_t i = 0; i < s.N; ++i) {
    m[i] = m[i] + static_cast<float>(std::log(S[i]));
    z[i] = t[i] < 0 ? 0.0f : m[i] - z[i];
  }
}

void vocab_parallel_cross_entropy_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                                           const Tensor& targets, const Tensor& dloss,
                                           int64_t vocab_start, int64_t vocab_size) {
  const char* op = "vocab_parallel_cross_entropy_backward";
  const Slice s = check_slice(logits_to_dlogits_local, targets, vocab_start, vocab_size, op);
  check_row_tensor(lse, s.N, op, "lse");
  check_row_tensor(dloss, s.N, op, "dloss");
  float* x = logits_to_dlogits_local.data<float>();  // [N, V/P] logits in, dlogits out
  const int32_t* t = targets.data<int32_t>();        // [N]
  const float* l = lse.data<float>();                // [N]
  const float* dl = dloss.data<float>();             // [N]
#pragma omp parallel for schedule(static) if (s.N * s.cols > kMinParallelWork)
  for (int64_t i = 0; i < s.N; ++i) {
    float* xi = x + i * s.cols;
    if (t[i] < 0) {
      std::fill(xi, xi + s.cols, 0.0f);
      continue;
    }
    const float li = l[i], gi = dl[i];
#pragma omp simd
    for (int64_t j = 0; j < s.real; ++j) xi[j] = kernels::detail::exp_fast(xi[j] - li) * gi;
    std::fill(xi + s.real, xi + s.cols, 0.0f);  // padding: probability 0
    const int64_t j = t[i] - vocab_start;
    if (j >= 0 && j < s.real) xi[j] -= gi;
  }
}

}  // namespace kiri::parallel::tp
