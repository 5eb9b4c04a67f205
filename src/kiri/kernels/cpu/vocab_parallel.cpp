// The element loops of tensor parallelism's vocabulary-parallel embedding and
// cross-entropy (parallel/tp): each rank computes on its slice of the vocabulary, and the
// collectives between these steps stay in parallel/tp. Moved here unchanged, so results
// are bitwise those of before.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::kMinParallelWork;

namespace {

// dst[c] = round(dst[c] + src[c]) for a 16-bit row (fp32 sum, one rounding).
template <uint16_t (*Round)(float), float (*Widen)(uint16_t)>
void add_row_lowp(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = Round(Widen(dst[c]) + src[c]);
}

}  // namespace

void vocab_slice_max_and_target(Tensor& max, Tensor& target_logit, const Tensor& logits_local,
                                const Tensor& targets, int64_t real, int64_t start) {
  const int64_t N = logits_local.dim(0), cols = logits_local.dim(1);
  const float* x = logits_local.data<float>();  // [N, cols]
  const int32_t* t = targets.data<int32_t>();   // [N]
  float* mx = max.data<float>();                // [N]
  float* z = target_logit.data<float>();        // [N]
#pragma omp parallel for schedule(static) if (N * cols > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * cols;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < real; ++j) m = xi[j] > m ? xi[j] : m;
    mx[i] = m;
    const int64_t j = t[i] - start;
    z[i] = t[i] >= 0 && j >= 0 && j < real ? xi[j] : 0.0f;
  }
}

void vocab_slice_sum_exp(Tensor& sum, const Tensor& logits_local, const Tensor& max, int64_t real) {
  // Float sums of blocks of kSumBlock terms, the block sums in double (as softmax_xent's
  // row log-sum-exp).
  constexpr int64_t kSumBlock = 1024;
  const int64_t N = logits_local.dim(0), cols = logits_local.dim(1);
  const float* x = logits_local.data<float>();  // [N, cols]
  const float* m = max.data<float>();           // [N]
  double* S = sum.data<double>();               // [N]
#pragma omp parallel for schedule(static) if (N * cols > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float* xi = x + i * cols;
    const float mi = m[i];
    double total = 0;
    for (int64_t b = 0; b < real; b += kSumBlock) {
      const int64_t e = std::min(real, b + kSumBlock);
      float part = 0;
#pragma omp simd reduction(+ : part)
      for (int64_t j = b; j < e; ++j) part += detail::exp_fast(xi[j] - mi);
      total += static_cast<double>(part);
    }
    S[i] = total;
  }
}

void vocab_slice_finish_loss(Tensor& losses, Tensor& lse, const Tensor& sum,
                             const Tensor& targets) {
  const int64_t N = lse.numel();
  const double* S = sum.data<double>();        // [N]
  const int32_t* t = targets.data<int32_t>();  // [N]
  float* m = lse.data<float>();                // [N]: the max in, lse out
  float* z = losses.data<float>();             // [N]: the target logit in, the loss out
  for (int64_t i = 0; i < N; ++i) {
    m[i] = m[i] + static_cast<float>(std::log(S[i]));
    z[i] = t[i] < 0 ? 0.0f : m[i] - z[i];
  }
}

void vocab_slice_xent_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                               const Tensor& targets, const Tensor& dloss, int64_t real,
                               int64_t start) {
  const int64_t N = logits_to_dlogits_local.dim(0), cols = logits_to_dlogits_local.dim(1);
  float* x = logits_to_dlogits_local.data<float>();  // [N, cols] logits in, dlogits out
  const int32_t* t = targets.data<int32_t>();        // [N]
  const float* l = lse.data<float>();                // [N]
  const float* dl = dloss.data<float>();             // [N]
#pragma omp parallel for schedule(static) if (N * cols > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    float* xi = x + i * cols;
    if (t[i] < 0) {
      std::fill(xi, xi + cols, 0.0f);
      continue;
    }
    const float li = l[i], gi = dl[i];
#pragma omp simd
    for (int64_t j = 0; j < real; ++j) xi[j] = detail::exp_fast(xi[j] - li) * gi;
    std::fill(xi + real, xi + cols, 0.0f);  // padding: probability 0
    const int64_t j = t[i] - start;
    if (j >= 0 && j < real) xi[j] -= gi;
  }
}

void vocab_slice_embedding_lookup(Tensor& rows, const Tensor& tokens, const Tensor& wte_local,
                                  int64_t start) {
  const int64_t n = tokens.numel(), C = wte_local.dim(1), Vl = wte_local.dim(0);
  const DType dt = wte_local.dtype();
  const int32_t* tok = tokens.data<int32_t>();  // [n]
  float* out = rows.data<float>();              // [n, C]
  const char* table = static_cast<const char*>(wte_local.raw());
  const int64_t row_bytes = C * static_cast<int64_t>(dtype_size(dt));
#pragma omp parallel for schedule(static) if (n * C > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float* row = out + i * C;
    const int64_t t = tok[i] - start;
    if (t < 0 || t >= Vl) {
      std::fill(row, row + C, 0.0f);
      continue;
    }
    const void* src = table + t * row_bytes;
    for (int64_t c = 0; c < C; ++c) row[c] = detail::load_as_float(src, dt, c);
  }
}

void vocab_slice_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                    int64_t start) {
  constexpr int64_t kColBlock = 32;  // token_embedding_backward's column block
  const int64_t M = dout.dim(0), C = dout.dim(1), Vl = dwte_local.dim(0);
  const int32_t* tok = tokens.data<int32_t>();  // [M]
  const float* g = dout.data<float>();          // [M, C]
  const DType dt = dwte_local.dtype();
  // As token_embedding_backward: a token may repeat, so split the columns;
  // each block walks the rows in order of i.
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (M * C > kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    for (int64_t i = 0; i < M; ++i) {
      const int64_t t = tok[i] - start;
      if (t < 0 || t >= Vl) continue;
      const float* src = g + i * C + c0;
      const int64_t at = t * C + c0;
      if (dt == DType::kF32) {
        float* dst = static_cast<float*>(dwte_local.raw()) + at;
        for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
      } else if (dt == DType::kBF16) {
        add_row_lowp<float_to_bf16, bf16_to_float>(static_cast<uint16_t*>(dwte_local.raw()) + at,
                                                   src, w);
      } else {
        add_row_lowp<float_to_half, half_to_float>(static_cast<uint16_t*>(dwte_local.raw()) + at,
                                                   src, w);
      }
    }
  }
}

}  // namespace kiri::kernels::cpu
