#pragma once
// Internal to gemm_packed.cpp: what its two instruction sets' kernels (gemm_packed_avx512.h,
// gemm_packed_avx2.h) share. Each ISA header defines a struct with
//   kL            lanes per vector,
//   kMR, kNR      the micro-kernel's tile of C (kNR = kNV vectors),
//   pack<D, W>    the packer of panels W wide (W = kMR for A, kNR for B),
//   micro<CD, NV, kMask>  the tile kernel, its last vector's lanes limited to `last` if kMask;
// the blocking and threading above them (gemm_packed.cpp) are the same for both.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiri/kernels/cpu/lowp.h"
#include "kiri/tensor/dtype.h"

namespace kiri::kernels::cpu::detail::packed {

constexpr int64_t kKC = 256;         // K block: an A micro-panel of 8 KiB (AVX-512)
constexpr int64_t kNC = 768;         // B block columns when A is packed whole (768 KiB)
constexpr int64_t kMC = 128;         // A block rows when B is packed whole
constexpr int64_t kWhole = 1 << 20;  // an operand packed whole: at most 4 MiB of fp32

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

template <DType D>
constexpr int64_t kSize = D == DType::kF32 ? 4 : 2;

// A 16-bit matrix read as X(r, c) = x[r * ld + c] (or x[c * ld + r] when trans).
struct Src {
  const uint16_t* x;
  int64_t ld;
  bool trans;
};

// A panel's layout (the ISA's pack<D, W> writes it): X(r0.., c0..) for rows [r0, r0 + rows)
// and columns [c0, c0 + cols) in panels of W rows each, column by column: panel p at dst + p *
// cols * W, element (r, c) at [c * W + r] (rows past the end are zeros). For A (W = MR) the
// rows are C's rows and the columns K; for B (W = NR), X is B transposed: its rows are C's
// columns.
// The columns [c, cols) of one panel (rows [pr0, pr0 + pr) of X, zeros past them), element by
// element: what the vector loops leave.
template <DType D, int64_t W>
void pack_tail(float* out, Src s, int64_t pr0, int64_t pr, int64_t c0, int64_t c, int64_t cols) {
  for (; c < cols; ++c)
    for (int64_t r = 0; r < W; ++r) {
      const int64_t gr = pr0 + r, gc = c0 + c;
      out[c * W + r] =
          r < pr ? load_as_float(s.x, D, s.trans ? gc * s.ld + gr : gr * s.ld + gc) : 0.0f;
    }
}

// One element of a tile's scratch written into C as the kernels write theirs: alpha times the
// sum, beta times C added (fp32) or C added when beta is 1 (16-bit, rounded once).
template <DType CD>
inline void write_element(void* c, int64_t i, float sum, float alpha, float beta) {
  const float s = alpha == 1.0f ? sum : alpha * sum;
  if constexpr (CD == DType::kF32) {
    float& d = static_cast<float*>(c)[i];
    d = beta == 0.0f ? s : std::fma(beta, d, s);
  } else {
    uint16_t& d = static_cast<uint16_t*>(c)[i];
    const float x = beta == 0.0f ? s : load_as_float(&d, CD, 0) + s;
    d = CD == DType::kBF16 ? float_to_bf16(x) : float_to_half(x);
  }
}

}  // namespace kiri::kernels::cpu::detail::packed
