// Token + position embedding (GPT-2's), and the token embedding alone (Llama's).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::check_tensor;

namespace {

struct EmbeddingDims {
  int64_t B, T, C, V, maxT;
};

// A table (or its gradient) of the op's scalar T; for T = float also BF16 or
// F16 (the mixed-precision tables).
template <typename T>
void check_table(const Tensor& t, const char* op, const char* name) {
  if constexpr (std::is_same_v<T, float>) {
    detail::check_float_dtype(t, op, name);
  } else {
    check_dtype<T>(t, op, name);
  }
}

// Checks tokens [B,T] I32 against wte [V,C] and wpe [maxT,C]; every token
// is checked here, before any parallel loop (which cannot throw).
template <typename Tt>
EmbeddingDims check_embedding(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                              const char* op) {
  check_dtype<int32_t>(tokens, op, "tokens");
  check_table<Tt>(wte, op, "wte");
  check_table<Tt>(wpe, op, "wpe");
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

// Columns at a time through an fp32 stack buffer (mixed-precision paths).
constexpr int64_t kCols = 256;

// out[i] = wte[tok[i]] + wpe[i % T] with any of F32/BF16/F16 tables.
void embedding_forward_mixed(float* o, const int32_t* tok, const Tensor& wte, const Tensor& wpe,
                             const EmbeddingDims& d) {
  const int64_t C = d.C;
  const DType te = wte.dtype(), pe = wpe.dtype();
  const char* a0 = static_cast<const char*>(wte.raw());
  const char* b0 = static_cast<const char*>(wpe.raw());
  const int64_t ra = C * static_cast<int64_t>(dtype_size(te));
  const int64_t rb = C * static_cast<int64_t>(dtype_size(pe));
#pragma omp parallel for schedule(static) if (d.B * d.T * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < d.B * d.T; ++i) {
    float* row = o + i * C;
    detail::to_f32(row, a0 + tok[i] * ra, te, C);
    float buf[kCols];
    const char* b = b0 + (i % d.T) * rb;
    for (int64_t c0 = 0; c0 < C; c0 += kCols) {
      const int64_t w = std::min(kCols, C - c0);
      detail::to_f32(buf, b + c0 * static_cast<int64_t>(dtype_size(pe)), pe, w);
      for (int64_t c = 0; c < w; ++c) row[c0 + c] = row[c0 + c] + buf[c];
    }
  }
}

// dwpe[t] (16-bit) += sum over b of g[b, t] ([B, Tn, C] fp32): each row read
// once, summed in fp32 in the order of b (as the fp32 path), rounded once.
void position_backward_lowp(Tensor& dwpe, const float* g, int64_t B, int64_t Tn, int64_t C) {
  const DType dt = dwpe.dtype();
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  char* base = static_cast<char*>(dwpe.raw());
#pragma omp parallel for schedule(static) if (B * Tn * C > detail::kMinParallelWork)
  for (int64_t t = 0; t < Tn; ++t) {
    for (int64_t c0 = 0; c0 < C; c0 += kCols) {
      const int64_t w = std::min(kCols, C - c0);
      char* dst = base + (t * C + c0) * es;
      float acc[kCols];
      detail::to_f32(acc, dst, dt, w);
      for (int64_t b = 0; b < B; ++b) {
        const float* src = g + (b * Tn + t) * C + c0;
        for (int64_t c = 0; c < w; ++c) acc[c] += src[c];
      }
      detail::from_f32(dst, dt, acc, w);
    }
  }
}

// dwte[tok[i]] (16-bit) += g[i] ([M, C] fp32) in order of i, each addition
// rounded (a token may repeat). Column blocks in parallel, as the fp32 path.
void token_backward_lowp(Tensor& dwte, const float* g, const int32_t* tok, int64_t M, int64_t C) {
  const DType dt = dwte.dtype();
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  char* base = static_cast<char*>(dwte.raw());
  constexpr int64_t kBlock = 32;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (M * C > detail::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, w = std::min(kBlock, C - c0);
    for (int64_t i = 0; i < M; ++i)
      detail::add_f32_into(base + (tok[i] * C + c0) * es, dt, g + i * C + c0, w);
  }
}

}  // namespace

template <typename T>
void embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  const EmbeddingDims d = check_embedding<T>(tokens, wte, wpe, "embedding_forward");
  check_tensor<T>(out, Shape{d.B, d.T, d.C}, "embedding_forward", "out");
  const int32_t* tok = tokens.data<int32_t>();  // [B, T]
  T* o = out.data<T>();                         // [B, T, C]
  if constexpr (std::is_same_v<T, float>) {
    if (wte.dtype() != DType::kF32 || wpe.dtype() != DType::kF32)
      return embedding_forward_mixed(o, tok, wte, wpe, d);
  }
  const T* te = wte.data<T>();  // [V, C]
  const T* pe = wpe.data<T>();  // [maxT, C]
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
  check_table<T>(dwpe, "position_embedding_backward", "dwpe");
  KIRI_CHECK(dout.rank() == 3 && dwpe.rank() == 2 && dout.dim(2) == dwpe.dim(1) &&
                 dout.dim(1) <= dwpe.dim(0),
             "position_embedding_backward: dout ", dout.shape().str(), " does not fit dwpe ",
             dwpe.shape().str());
  const T* g = dout.data<T>();  // [B, T, C]
  const int64_t B = dout.dim(0), Tn = dout.dim(1), C = dout.dim(2);
  if constexpr (std::is_same_v<T, float>) {
    if (dwpe.dtype() != DType::kF32) return position_backward_lowp(dwpe, g, B, Tn, C);
  }
  T* dpe = dwpe.data<T>();  // [maxT, C]
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
  check_table<T>(dwte, "token_embedding_backward", "dwte");
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
  if constexpr (std::is_same_v<T, float>) {
    if (dwte.dtype() != DType::kF32) return token_backward_lowp(dwte, g, tok, M, C);
  }
  T* dte = dwte.data<T>();  // [V, C]
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

template <typename T>
void token_embedding_forward(Tensor& out, const Tensor& tokens, const Tensor& wte) {
  const char* op = "token_embedding_forward";
  check_dtype<int32_t>(tokens, op, "tokens");
  check_table<T>(wte, op, "wte");
  KIRI_CHECK(wte.rank() == 2, op, ": wte must be [V, C], got ", wte.shape().str());
  const int64_t M = tokens.numel(), V = wte.dim(0), C = wte.dim(1);
  detail::check_matrix<T>(out, M, C, op, "out");
  const int32_t* tok = tokens.data<int32_t>();  // [M]
  for (int64_t i = 0; i < M; ++i)               // before the parallel loop, which cannot throw
    KIRI_CHECK(tok[i] >= 0 && tok[i] < V, op, ": token ", tok[i], " at position ", i,
               " outside the vocabulary of ", V);
  T* o = out.data<T>();  // [M, C]
  const DType dt = wte.dtype();
  const int64_t row_bytes = C * static_cast<int64_t>(dtype_size(dt));
  const char* table = static_cast<const char*>(wte.raw());  // [V, C]
#pragma omp parallel for schedule(static) if (M * C > detail::kMinParallelWork)
  for (int64_t i = 0; i < M; ++i) {
    const char* row = table + tok[i] * row_bytes;
    if constexpr (std::is_same_v<T, float>) {
      detail::to_f32(o + i * C, row, dt, C);  // F32, BF16 or F16
    } else {
      std::copy_n(reinterpret_cast<const T*>(row), C, o + i * C);
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
template void token_embedding_forward<float>(Tensor&, const Tensor&, const Tensor&);
template void token_embedding_forward<double>(Tensor&, const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
