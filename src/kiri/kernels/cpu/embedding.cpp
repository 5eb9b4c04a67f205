// Token + position embedding.
#include <algorithm>
#include <cstdint>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels {

using detail::check_dtype;
using detail::check_tensor;

namespace {

struct EmbeddingDims {
  int64_t B, T, C, V, maxT;
};

// Checks tokens [B,T] I32 against wte [V,C] and wpe [maxT,C]; every token
// is checked here, before any parallel loop (which cannot throw).
template <typename Tt>
EmbeddingDims check_embedding(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                              const char* op) {
  check_dtype<int32_t>(tokens, op, "tokens");
  check_dtype<Tt>(wte, op, "wte");
  check_dtype<Tt>(wpe, op, "wpe");
  KIRI_CHECK(tokens.rank() == 2, op, ": tokens must be [B, T], got ", tokens.shape().str());
  KIRI_CHECK(wte.rank() == 2 && wpe.rank() == 2 && wte.dim(1) == wpe.dim(1), op, ": wte ",
             wte.shape().str(), " and wpe ", wpe.shape().str(), " must be [V, C] and [maxT, C]");
  EmbeddingDims d{tokens.dim(0), tokens.dim(1), wte.dim(1), wte.dim(0), wpe.dim(0)};
  KIRI_CHECK(d.T <= d.maxT, op, ": tokens ", tokens.shape().str(), " longer than wpe ",
             wpe.shape().str());
  const int32_t* tok = tokens.data<int32_t>();  // [B, T]
  for (int64_t i = 0; i < d.B * d.T; ++i)
    KIRI_CHECK(tok[i] >= 0 && tok[i] < d.V, op, ": token ", tok[i], " at position ", i,
               " of tokens ", tokens.shape().str(), " outside the vocabulary of ", d.V);
  return d;
}

}  // namespace

template <typename T>
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const EmbeddingDims d = check_embedding<T>(tokens, wte, wpe, "embedding_forward");
  check_tensor<T>(out, Shape{d.B, d.T, d.C}, "embedding_forward", "out");
  const int32_t* tok = tokens.data<int32_t>();  // [B, T]
  const T* te = wte.data<T>();                  // [V, C]
  const T* pe = wpe.data<T>();                  // [maxT, C]
  T* o = out.data<T>();                         // [B, T, C]
  const int64_t C = d.C;
#pragma omp parallel for schedule(static) if (d.B * d.T * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < d.B * d.T; ++i) {
    const T* a = te + tok[i] * C;
    const T* b = pe + (i % d.T) * C;
    T* row = o + i * C;
    for (int64_t c = 0; c < C; ++c) row[c] = a[c] + b[c];
  }
}

template <typename T>
void embedding_backward(Tensor& dwte, Tensor& dwpe, const Tensor& dout, const Tensor& tokens) {
  const EmbeddingDims d = check_embedding<T>(tokens, dwte, dwpe, "embedding_backward");
  check_tensor<T>(dout, Shape{d.B, d.T, d.C}, "embedding_backward", "dout");
  position_embedding_backward<T>(dwpe, dout);
  Tensor rows = dout.view({d.B * d.T, d.C});
  Tensor flat = tokens.view({d.B * d.T});
  token_embedding_backward<T>(dwte, rows, flat);
}

template <typename T>
void position_embedding_backward(Tensor& dwpe, const Tensor& dout) {
  check_dtype<T>(dwpe, "position_embedding_backward", "dwpe");
  KIRI_CHECK(dout.rank() == 3 && dwpe.rank() == 2 && dout.dim(2) == dwpe.dim(1) &&
                 dout.dim(1) <= dwpe.dim(0),
             "position_embedding_backward: dout ", dout.shape().str(), " does not fit dwpe ",
             dwpe.shape().str());
  const T* g = dout.data<T>();  // [B, T, C]
  T* dpe = dwpe.data<T>();      // [maxT, C]
  const int64_t B = dout.dim(0), Tn = dout.dim(1), C = dout.dim(2);
  // dwpe[t] += sum over b, in order of b: one t per iteration.
#pragma omp parallel for schedule(static) if (B * Tn * C > detail::kMinParallelWork)
  for (int64_t t = 0; t < Tn; ++t) {
    T* row = dpe + t * C;
    for (int64_t b = 0; b < B; ++b) {
      const T* src = g + (b * Tn + t) * C;
      for (int64_t c = 0; c < C; ++c) row[c] += src[c];
    }
  }
}

template <typename T>
void token_embedding_backward(Tensor& dwte, const Tensor& dout, const Tensor& tokens) {
  check_dtype<T>(dwte, "token_embedding_backward", "dwte");
  check_dtype<int32_t>(tokens, "token_embedding_backward", "tokens");
  KIRI_CHECK(dwte.rank() == 2 && dout.rank() == 2 && dout.dim(1) == dwte.dim(1) &&
                 tokens.numel() == dout.dim(0),
             "token_embedding_backward: dout ", dout.shape().str(), ", tokens ",
             tokens.shape().str(), " and dwte ", dwte.shape().str(), " do not fit");
  const int64_t M = dout.dim(0), C = dout.dim(1), V = dwte.dim(0);
  const int32_t* tok = tokens.data<int32_t>();  // [M]
  for (int64_t i = 0; i < M; ++i)
    KIRI_CHECK(tok[i] >= 0 && tok[i] < V, "token_embedding_backward: token ", tok[i],
               " outside the vocabulary of ", V);
  const T* g = dout.data<T>();  // [M, C]
  T* dte = dwte.data<T>();      // [V, C]
  // A token may repeat, so rows of dwte are not owned by positions.
  // Split the columns instead; each block walks all positions in order.
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (M * C > detail::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int64_t i = 0; i < M; ++i) {
      T* dst = dte + tok[i] * C;
      const T* src = g + i * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

template void embedding_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void embedding_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void embedding_backward<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void embedding_backward<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void position_embedding_backward<float>(Tensor&, const Tensor&);
template void position_embedding_backward<double>(Tensor&, const Tensor&);
template void token_embedding_backward<float>(Tensor&, const Tensor&, const Tensor&);
template void token_embedding_backward<double>(Tensor&, const Tensor&, const Tensor&);

}  // namespace kiri::kernels
