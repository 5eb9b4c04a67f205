#include "kiri/parallel/tp/embedding.h"

#include <algorithm>
#include <cstring>

#include "kiri/parallel/tp/mappings.h"

namespace kiri::parallel::tp {

namespace {

constexpr int64_t kMinParallelWork = 1 << 15;  // as the CPU kernels
constexpr int64_t kColBlock = 32;              // token_embedding_backward's column block

void check_table(const Tensor& t, const char* op, const char* name) {
  const DType d = t.dtype();
  KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op, ": ", name, " is ",
             dtype_name(d), ", expected F32, BF16 or F16");
  KIRI_CHECK(t.rank() == 2, op, ": ", name, " must be [V/tp, C], got ", t.shape().str());
}

float widen(const void* p, DType d, int64_t i) {
  if (d == DType::kF32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return d == DType::kBF16 ? bf16_to_float(h) : half_to_float(h);
}

// dst[c] = round(dst[c] + src[c]) for a 16-bit row (fp32 sum, one rounding).
template <uint16_t (*Round)(float), float (*Widen)(uint16_t)>
void add_row_lowp(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dst[c] = Round(Widen(dst[c]) + src[c]);
}

// rows[i] = wte_local[tok[i] - start] widened, or zeros outside the slice.
void lookup_rows(float* rows, const int32_t* tok, int64_t n, const Tensor& wte_local,
                 int64_t start) {
  const int64_t C = wte_local.dim(1), Vl = wte_local.dim(0);
  const DType dt = wte_local.dtype();
  const char* table = static_cast<const char*>(wte_local.raw());
  const int64_t row_bytes = C * static_cast<int64_t>(dtype_size(dt));
#pragma omp parallel for schedule(static) if (n * C > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    float* row = rows + i * C;
    const int64_t t = tok[i] - start;
    if (t < 0 || t >= Vl) {
      std::fill(row, row + C, 0.0f);
      continue;
    }
    const void* src = table + t * row_bytes;
    for (int64_t c = 0; c < C; ++c) row[c] = widen(src, dt, c);
  }
}

}  // namespace

namespace {

// out [B,T,C] = this rank's rows of wte[tokens], zeros elsewhere (no communication).
void vocab_parallel_lookup(comm::Communicator& tp, Tensor& out, const Tensor& tokens,
                           const Tensor& wte_local, int64_t vocab_start) {
  const char* op = "vocab_parallel_embedding_forward";
  check_table(wte_local, op, "wte_local");
  KIRI_CHECK(tokens.dtype() == DType::kI32 && tokens.rank() == 2, op,
             ": tokens must be [B, T] I32, got ", tokens.shape().str(), " ",
             dtype_name(tokens.dtype()));
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = wte_local.dim(1);
  const int64_t Vl = wte_local.dim(0), V = Vl * tp.size();
  KIRI_CHECK(out.dtype() == DType::kF32 && out.shape() == Shape({B, T, C}), op, ": out ",
             out.shape().str(), " ", dtype_name(out.dtype()), ", expected [", B, ", ", T, ", ", C,
             "] F32");
  KIRI_CHECK(vocab_start == tp.rank() * Vl, op, ": vocab_start ", vocab_start, " on tp rank ",
             tp.rank(), " of a table of ", Vl, " rows per rank, expected ", tp.rank() * Vl);
  const int32_t* tok = tokens.data<int32_t>();  // [B, T]
  for (int64_t i = 0; i < B * T; ++i)
    KIRI_CHECK(tok[i] >= 0 && tok[i] < V, op, ": token ", tok[i], " at position ", i,
               " outside the padded vocabulary of ", V, " (", tp.size(), " ranks x ", Vl, ")");
  lookup_rows(out.data<float>(), tok, B * T, wte_local, vocab_start);
}

}  // namespace

void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& out, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start) {
  vocab_parallel_lookup(tp, out, tokens, wte_local, vocab_start);
  ReduceFromRegion::forward(tp, out);  // g: one non-zero term per row
}

void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& full, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start, Tensor& local) {
  vocab_parallel_lookup(tp, full, tokens, wte_local, vocab_start);
  const Tensor rows = full.view({full.dim(0) * full.dim(1), full.dim(2)});  // [N, C]
  ReduceScatterToSequence::forward(tp, rows, local);  // one non-zero term per row
}

void vocab_parallel_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                       int64_t vocab_start) {
  const char* op = "vocab_parallel_embedding_backward";
  check_table(dwte_local, op, "dwte_local");
  KIRI_CHECK(dout.dtype() == DType::kF32 && tokens.dtype() == DType::kI32, op, ": dout is ",
             dtype_name(dout.dtype()), ", tokens ", dtype_name(tokens.dtype()),
             ", expected F32 and I32");
  KIRI_CHECK(dout.rank() == 2 && dout.dim(1) == dwte_local.dim(1) && tokens.numel() == dout.dim(0),
             op, ": dout ", dout.shape().str(), ", tokens ", tokens.shape().str(),
             " and dwte_local ", dwte_local.shape().str(), " do not fit");
  const int64_t M = dout.dim(0), C = dout.dim(1), Vl = dwte_local.dim(0);
  const int32_t* tok = tokens.data<int32_t>();  // [M]
  for (int64_t i = 0; i < M; ++i)
    KIRI_CHECK(tok[i] >= 0, op, ": token ", tok[i], " at row ", i, " is negative");
  const float* g = dout.data<float>();  // [M, C]
  const DType dt = dwte_local.dtype();
  // As token_embedding_backward: a token may repeat, so split the columns;
  // each block walks the rows in order of i.
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (M * C > kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    for (int64_t i = 0; i < M; ++i) {
      const int64_t t = tok[i] - vocab_start;
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

}  // namespace kiri::parallel::tp
