// gemm_lowp's packed path: 16-bit A and B widened to fp32 as they are packed into the panels
// that an fp32 FMA micro-kernel reads, so that each element is converted in the same pass that
// lays it out for the kernel. via_f32 widens into row-major panels and then oneDNN's sgemm
// packs them again: one more pass over every operand, which on a small step (gpt2-124M: 256
// tokens against 768 x 3072 weights) costs as much as a tenth of the GEMM.
//
// The blocking is BLIS's (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
// Instantiating BLAS Functionality", 2015), with the roles of the caches set for one operand
// packed whole: the kernel computes an MR x NR tile of C over a K block of KC, its A micro-panel
// (MR x KC, 8 KiB) stays in L1 while the B micro-panels (KC x NR) stream from L2. Each C element
// is the sum of its K blocks in order, each block's products summed in k order by one FMA
// chain, whatever the threads and the M and N blocking: the same bits on any thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/lowp_simd.h"

namespace kiri::kernels::cpu::detail {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12 warns about the _mm512_undefined_* placeholders inside its own intrinsics once they
// are inlined here (a known false positive, as in convert.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace {

constexpr int64_t kMR = 8;           // C rows per tile
constexpr int64_t kNV = 3;           // C columns per tile, in 16-float vectors
constexpr int64_t kNR = 16 * kNV;    // C columns per tile
constexpr int64_t kKC = 256;         // K block: an A micro-panel of 8 KiB
constexpr int64_t kNC = 768;         // B block columns when A is packed whole (768 KiB)
constexpr int64_t kMC = 128;         // A block rows when B is packed whole
constexpr int64_t kWhole = 1 << 20;  // an operand packed whole: at most 4 MiB of fp32

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t round_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// r[16] rows of 16 floats transposed in place: r[c] holds column c.
inline void transpose16(__m512* r) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // rows 4g..4g+3: columns 4L+q in u[4g+q], lane L
    const __m512* s = t + 4 * g;
    u[4 * g + 0] = _mm512_shuffle_ps(s[0], s[2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm512_shuffle_ps(s[0], s[2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm512_shuffle_ps(s[1], s[3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm512_shuffle_ps(s[1], s[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x88);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xDD);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xDD);
    r[q] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[8 + q] = _mm512_shuffle_f32x4(v0, w0, 0xDD);
    r[4 + q] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[12 + q] = _mm512_shuffle_f32x4(v1, w1, 0xDD);
  }
}

// A 16-bit matrix read as X(r, c) = x[r * ld + c] (or x[c * ld + r] when trans).
struct Src {
  const uint16_t* x;
  int64_t ld;
  bool trans;
};

// Packs X(r0.., c0..) for rows [r0, r0 + rows) and columns [c0, c0 + cols) into panels of W
// rows each, column by column: panel p at dst + p * cols * W, element (r, c) at [c * W + r]
// (rows past the end are zeros). For A (W = MR) the rows are C's rows and the columns K; for B
// (W = NR), X is B transposed: its rows are C's columns.
// The columns [c, cols) of one panel (rows [pr0, pr0 + pr) of X, zeros past them), element by
// element: what the vector loops below leave.
template <DType D, int64_t W>
void pack_tail(float* out, Src s, int64_t pr0, int64_t pr, int64_t c0, int64_t c, int64_t cols) {
  for (; c < cols; ++c)
    for (int64_t r = 0; r < W; ++r) {
      const int64_t gr = pr0 + r, gc = c0 + c;
      out[c * W + r] =
          r < pr ? load_as_float(s.x, D, s.trans ? gc * s.ld + gr : gr * s.ld + gc) : 0.0f;
    }
}

// 16 rows of X from row `row`, columns [c0 + c, c0 + c + 16), widened and transposed: t[i] is
// column c + i of the 16 rows.
template <DType D>
inline void rows16(__m512* t, Src s, int64_t row, int64_t col) {
  for (int i = 0; i < 16; ++i) t[i] = load16(s.x + (row + i) * s.ld + col, D);
  transpose16(t);
}

// Packs X(r0.., c0..) for rows [r0, r0 + rows) and columns [c0, c0 + cols) into panels of W
// rows each, column by column: panel p at dst + p * cols * W, element (r, c) at [c * W + r]
// (rows past the end are zeros). For A (W = MR) the rows are C's rows and the columns K; for B
// (W = NR), X is B transposed: its rows are C's columns.
template <DType D, int64_t W>
void pack(float* dst, Src s, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  const int64_t panels = ceil_div(rows, W);
  for (int64_t p = 0; p < panels; ++p) {
    float* out = dst + p * cols * W;
    const int64_t pr0 = r0 + p * W, left = r0 + rows - pr0, pr = std::min(W, left);
    int64_t c = 0;
    if (s.trans && pr == W) {
      // X(r, c) = x[c * ld + r]: a panel's column is W contiguous values.
      for (; c < cols; ++c) {
        const uint16_t* in = s.x + (c0 + c) * s.ld + pr0;
        if constexpr (W == 8)
          _mm256_store_ps(out + c * W, _mm512_castps512_ps256(load16_masked(in, D, 0xFF)));
        else
          for (int64_t v = 0; v < W; v += 16) _mm512_store_ps(out + c * W + v, load16(in + v, D));
      }
    } else if (!s.trans && W % 16 == 0 && pr == W) {
      // X(r, c) = x[r * ld + c]: 16 rows x 16 columns transposed at a time, 16 rows along
      // their length before the next 16 (16 streams from memory at once, not W).
      const int64_t vec_cols = cols / 16 * 16;
      for (int64_t v = 0; v < W; v += 16)
        for (c = 0; c < vec_cols; c += 16) {
          __m512 t[16];
          rows16<D>(t, s, pr0 + v, c0 + c);
          for (int i = 0; i < 16; ++i) _mm512_store_ps(out + (c + i) * W + v, t[i]);
        }
    } else if (!s.trans && W == 8 && left >= 16) {
      // Two 8-row panels from one 16 x 16 transpose: the low half of each column to panel p,
      // the high half to panel p + 1.
      float* next = out + cols * W;
      for (; c + 16 <= cols; c += 16) {
        __m512 t[16];
        rows16<D>(t, s, pr0, c0 + c);
        for (int i = 0; i < 16; ++i) {
          _mm256_store_ps(out + (c + i) * W, _mm512_castps512_ps256(t[i]));
          _mm256_store_ps(next + (c + i) * W,
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t[i]), 1)));
        }
      }
      pack_tail<D, W>(next, s, pr0 + W, W, c0, c, cols);
      pack_tail<D, W>(out, s, pr0, W, c0, c, cols);
      ++p;
      continue;
    }
    pack_tail<D, W>(out, s, pr0, pr, c0, c, cols);
  }
}

template <DType D>
constexpr int64_t kSize = D == DType::kF32 ? 4 : 2;

// C tile [MR, 16 NV] at c (dtype CD, leading dimension ldc) = alpha * sum_k a[k] b[k] + beta
// * C; beta 0 does not read C; a 16-bit C takes beta 0 or 1 and is rounded once, as from_f32
// and add_f32_into round. a: [kc, MR] packed, b: [kc, NR] packed (64-byte aligned), of which
// the first NV vectors are read. kMask: the last vector's C columns are those of `last` only
// (C's last columns: tiny's 256 are 5 tiles of 48 and one of 16).
template <DType CD, int NV = kNV, bool kMask = false>
inline void micro(int64_t kc, const float* __restrict a, const float* __restrict b, void* c,
                  int64_t ldc, float alpha, float beta, __mmask16 last = 0xFFFF) {
  __m512 acc[kMR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + v * 16);
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
    a += kMR;
    b += kNR;
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
  char* cb = static_cast<char*>(c);
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) {
      char* p = cb + (i * ldc + v * 16) * kSize<CD>;
      const __m512 s = alpha == 1.0f ? acc[i][v] : _mm512_mul_ps(al, acc[i][v]);
      if (kMask && v == NV - 1) {
        const __m512 old = beta == 0.0f ? s : load16_masked(p, CD, last);
        store16_masked(p, CD,
                       beta == 0.0f        ? s
                       : CD == DType::kF32 ? _mm512_fmadd_ps(be, old, s)
                                           : _mm512_add_ps(old, s),
                       last);
      } else if constexpr (CD == DType::kF32) {
        _mm512_storeu_ps(p, beta == 0.0f ? s : _mm512_fmadd_ps(be, _mm512_loadu_ps(p), s));
      } else {
        store16(p, CD, beta == 0.0f ? s : _mm512_add_ps(load16(p, CD), s));
      }
    }
}

// A tile of all MR rows and nr < NR columns: as few vectors as cover them, the last masked.
template <DType CD>
void micro_cols(int64_t kc, const float* a, const float* b, void* c, int64_t ldc, int64_t nr,
                float alpha, float beta) {
  const int nv = static_cast<int>(ceil_div(nr, 16));
  const int tail = static_cast<int>(nr - 16 * (nv - 1));
  const auto last = static_cast<__mmask16>(tail == 16 ? 0xFFFF : (1u << tail) - 1);
  if (nv == 1) return micro<CD, 1, true>(kc, a, b, c, ldc, alpha, beta, last);
  if (nv == 2) return micro<CD, 2, true>(kc, a, b, c, ldc, alpha, beta, last);
  micro<CD, 3, true>(kc, a, b, c, ldc, alpha, beta, last);
}

// A tile of fewer than MR rows (C's last rows), through a full one in scratch; each element
// rounded as micro rounds it.
template <DType CD>
void micro_edge(int64_t kc, const float* a, const float* b, void* c, int64_t ldc, int64_t mr,
                int64_t nr, float alpha, float beta) {
  alignas(64) float t[kMR * kNR];
  micro<DType::kF32>(kc, a, b, t, kNR, 1.0f, 0.0f);
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) {
      const float s = alpha == 1.0f ? t[i * kNR + j] : alpha * t[i * kNR + j];
      if constexpr (CD == DType::kF32) {
        float& d = static_cast<float*>(c)[i * ldc + j];
        d = beta == 0.0f ? s : std::fma(beta, d, s);
      } else {
        uint16_t& d = static_cast<uint16_t*>(c)[i * ldc + j];
        const float x = beta == 0.0f ? s : load_as_float(&d, CD, 0) + s;
        d = CD == DType::kBF16 ? float_to_bf16(x) : float_to_half(x);
      }
    }
}

// C[rows, cols] at c (dtype CD, leading dimension ldc) with beta: the packed A panels of those
// rows (ap, [kc, MR] each) times the packed B panels of those columns (bp, [kc, NR] each). ir
// outer: an A micro-panel stays in L1 while the B panels stream from L2 (B's in L1 and A's
// streaming, with KC 128 for room, measured 1.08x slower on gpt2-124M's step).
template <DType CD>
void tiles(int64_t kc, const float* ap, const float* bp, void* c, int64_t ldc, int64_t rows,
           int64_t cols, float alpha, float beta) {
  char* cb = static_cast<char*>(c);
  for (int64_t i = 0; i < rows; i += kMR) {
    const float* a = ap + (i / kMR) * kc * kMR;
    const int64_t mr = std::min(kMR, rows - i);
    for (int64_t j = 0; j < cols; j += kNR) {
      const float* b = bp + (j / kNR) * kc * kNR;
      const int64_t nr = std::min(kNR, cols - j);
      void* ct = cb + (i * ldc + j) * kSize<CD>;
      if (mr == kMR && nr == kNR)
        micro<CD>(kc, a, b, ct, ldc, alpha, beta);
      else if (mr == kMR)
        micro_cols<CD>(kc, a, b, ct, ldc, nr, alpha, beta);
      else
        micro_edge<CD>(kc, a, b, ct, ldc, mr, nr, alpha, beta);
    }
  }
}

// 64-byte aligned, per thread, grown to the largest size asked for (never shrunk or cleared:
// a vector made per call was zeroed per call). whole: the operand packed whole, in the calling
// thread's; a, b, c: a block of A, of B and a 16-bit C's fp32 panel, in each thread's own.
struct Buffers {
  std::vector<float> whole, a, b, c;
};
Buffers& buffers() {
  thread_local Buffers s;
  return s;
}
float* aligned(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n + 16) v.resize(static_cast<size_t>(n + 16));
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

// How C is written for one block of it: in place (an fp32 C, or a 16-bit C summed in one K
// block, rounded by the kernel), or a 16-bit C of several K blocks through an fp32 panel that
// is rounded into C (added into it when beta is 1) once every K block is summed.
struct CBlock {
  void* c;
  int64_t ldc;
  DType dt;    // the dtype the kernel writes: C's, or F32 into the panel
  bool panel;  // finish_c rounds the panel into C
};
CBlock c_block(const LowpGemmArgs& g, int64_t m0, int64_t rows, int64_t n0, int64_t cols) {
  const int64_t es = static_cast<int64_t>(dtype_size(g.c_dtype));
  if (g.c_dtype == DType::kF32 || g.K <= kKC)
    return {static_cast<char*>(g.C) + (m0 * g.ldc + n0) * es, g.ldc, g.c_dtype, false};
  return {aligned(buffers().c, rows * cols), cols, DType::kF32, true};
}
void finish_c(const LowpGemmArgs& g, const CBlock& cb, int64_t m0, int64_t rows, int64_t n0,
              int64_t cols) {
  if (!cb.panel) return;
  char* base = static_cast<char*>(g.C);
  const int64_t es = static_cast<int64_t>(dtype_size(g.c_dtype));
  const float* panel = static_cast<const float*>(cb.c);
  for (int64_t r = 0; r < rows; ++r) {
    void* row = base + ((m0 + r) * g.ldc + n0) * es;
    if (g.beta == 1.0f)
      add_f32_into(row, g.c_dtype, panel + r * cols, cols);
    else
      from_f32(row, g.c_dtype, panel + r * cols, cols);
  }
}
// K block pc of C block cb: the caller's beta for the first (0 into a panel, whose beta
// finish_c applies), then 1.
void block_tiles(const LowpGemmArgs& g, const CBlock& cb, int64_t pc, int64_t kc, const float* ap,
                 const float* bp, int64_t rows, int64_t cols) {
  const float beta = pc > 0 ? 1.0f : cb.panel ? 0.0f : g.beta;
  switch (cb.dt) {
    case DType::kBF16:
      return tiles<DType::kBF16>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
    case DType::kF16:
      return tiles<DType::kF16>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
    default:
      return tiles<DType::kF32>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
  }
}

Src src_a(const LowpGemmArgs& g) {
  return {static_cast<const uint16_t*>(g.A), g.lda, g.trans_a};
}
// B as the packer reads it: rows are C's columns (so B's own layout reads transposed).
Src src_b(const LowpGemmArgs& g) {
  return {static_cast<const uint16_t*>(g.B), g.ldb, !g.trans_b};
}

// op(A) packed whole (M x K at most kWhole), B packed a block of kNC columns and a K block at a
// time, the column blocks spread over the threads.
template <DType D>
void a_whole(const LowpGemmArgs& g, int threads) {
  const int64_t mp = round_up(g.M, kMR), nkb = ceil_div(g.K, kKC);
  float* ap = aligned(buffers().whole, mp * g.K);  // K block pc at ap + pc * kKC * mp
  const Src sa = src_a(g), sb = src_b(g);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pc = 0; pc < nkb; ++pc) {
    const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
    pack<D, kMR>(ap + k0 * mp, sa, 0, g.M, k0, kc);
  }
  // Column blocks: kNC at most, a multiple of the threads in number (whole tiles each).
  int64_t nblk = ceil_div(g.N, kNC);
  nblk = round_up(std::max<int64_t>(nblk, threads), threads);
  const int64_t nc = round_up(ceil_div(g.N, nblk), kNR);
  nblk = ceil_div(g.N, nc);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t jb = 0; jb < nblk; ++jb) {
    const int64_t n0 = jb * nc, cols = std::min(nc, g.N - n0);
    const CBlock cb = c_block(g, 0, g.M, n0, cols);
    float* bp = aligned(buffers().b, std::min(kKC, g.K) * round_up(cols, kNR));
    for (int64_t pc = 0; pc < nkb; ++pc) {
      const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
      pack<D, kNR>(bp, sb, n0, cols, k0, kc);
      block_tiles(g, cb, pc, kc, ap + k0 * mp, bp, g.M, cols);
    }
    finish_c(g, cb, 0, g.M, n0, cols);
  }
}

// B packed whole (K x N at most kWhole), op(A) packed a block of kMC rows and a K block at a
// time, the row blocks spread over the threads.
template <DType D>
void b_whole(const LowpGemmArgs& g, int threads) {
  const int64_t np = round_up(g.N, kNR), nkb = ceil_div(g.K, kKC);
  float* bp = aligned(buffers().whole, np * g.K);  // K block pc at bp + pc * kKC * np
  const Src sa = src_a(g), sb = src_b(g);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pc = 0; pc < nkb; ++pc) {
    const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
    pack<D, kNR>(bp + k0 * np, sb, 0, g.N, k0, kc);
  }
  const int64_t mblk = ceil_div(g.M, kMC);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t ib = 0; ib < mblk; ++ib) {
    const int64_t m0 = ib * kMC, rows = std::min(kMC, g.M - m0);
    const CBlock cb = c_block(g, m0, rows, 0, g.N);
    float* ap = aligned(buffers().a, std::min(kKC, g.K) * round_up(rows, kMR));
    for (int64_t pc = 0; pc < nkb; ++pc) {
      const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
      pack<D, kMR>(ap, sa, m0, rows, k0, kc);
      block_tiles(g, cb, pc, kc, ap, bp + k0 * np, rows, g.N);
    }
    finish_c(g, cb, m0, rows, 0, g.N);
  }
}

// Neither operand fits whole (the LM head's input gradient: K = V), an fp32 C: the K blocks
// outermost, each A block (M x KC) packed once and the B block of each thread's columns
// beside it, C accumulating in place.
template <DType D>
void k_outer(const LowpGemmArgs& g, int threads) {
  const int64_t mp = round_up(g.M, kMR);
  float* ap = aligned(buffers().whole, mp * std::min(kKC, g.K));
  const Src sa = src_a(g), sb = src_b(g);
  int64_t nblk = round_up(std::max<int64_t>(ceil_div(g.N, kNC), threads), threads);
  const int64_t nc = round_up(ceil_div(g.N, nblk), kNR);
  nblk = ceil_div(g.N, nc);
  float* c = static_cast<float*>(g.C);
  for (int64_t k0 = 0; k0 < g.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, g.K - k0);
    const float beta = k0 == 0 ? g.beta : 1.0f;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < mp / kMR; ++p)
        pack<D, kMR>(ap + p * kc * kMR, sa, p * kMR, std::min(kMR, g.M - p * kMR), k0, kc);
#pragma omp for schedule(static)
      for (int64_t jb = 0; jb < nblk; ++jb) {
        const int64_t n0 = jb * nc, cols = std::min(nc, g.N - n0);
        float* bp = aligned(buffers().b, kc * round_up(cols, kNR));
        pack<D, kNR>(bp, sb, n0, cols, k0, kc);
        tiles<DType::kF32>(kc, ap, bp, c + n0, g.ldc, g.M, cols, g.alpha, beta);
      }
    }
  }
}

// How the packed kernel cuts g, or kNone where it does not take it.
enum class Plan { kNone, kAWhole, kBWhole, kKOuter };
Plan plan(const LowpGemmArgs& g) {
  // A 16-bit C takes beta 0 or 1 (the linear layers' two); others go via_f32.
  if (g.c_dtype != DType::kF32 && g.beta != 0.0f && g.beta != 1.0f) return Plan::kNone;
  if (g.M * g.K <= kWhole && g.M <= g.N) return Plan::kAWhole;
  if (g.K * g.N <= kWhole) return Plan::kBWhole;
  if (g.c_dtype == DType::kF32 && g.M * kKC <= kWhole) return Plan::kKOuter;
  return Plan::kNone;
}

template <DType D>
void packed(const LowpGemmArgs& g, Plan p) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (p == Plan::kAWhole) return a_whole<D>(g, threads);
  if (p == Plan::kBWhole) return b_whole<D>(g, threads);
  k_outer<D>(g, threads);
}

}  // namespace

bool gemm_lowp_packed_supported() {
  return true;
}

bool gemm_lowp_packed_takes(const LowpGemmArgs& g) {
  return plan(g) != Plan::kNone;
}

bool gemm_lowp_packed(const LowpGemmArgs& g) {
  const Plan p = plan(g);
  if (p == Plan::kNone) return false;
  if (g.ab == DType::kBF16)
    packed<DType::kBF16>(g, p);
  else
    packed<DType::kF16>(g, p);
  return true;
}

#else  // no AVX-512: via_f32 takes every GEMM

bool gemm_lowp_packed_supported() {
  return false;
}
bool gemm_lowp_packed_takes(const LowpGemmArgs&) {
  return false;
}
bool gemm_lowp_packed(const LowpGemmArgs&) {
  return false;
}

#endif

}  // namespace kiri::kernels::cpu::detail
