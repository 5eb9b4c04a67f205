#pragma once
// Internal to gemm_packed.cpp: the AVX-512 packers and micro-kernel (gemm_packed_common.h says
// what each ISA header defines). An 8 x 48 tile of C: 24 zmm accumulators; per k, 3 loads of
// B, 8 broadcasts of A and 24 FMAs (173 GFLOP/s on packed data in cache on a Xeon whose
// measured FMA peak is 179).
#include <immintrin.h>

#include "kiri/kernels/cpu/gemm_packed_common.h"
#include "kiri/kernels/cpu/lowp_simd.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
namespace kiri::kernels::cpu::detail::packed {

struct Avx512 {
  static constexpr int64_t kL = 16;
  static constexpr int64_t kMR = 8;         // C rows per tile
  static constexpr int64_t kNV = 3;         // C columns per tile, in 16-float vectors
  static constexpr int64_t kNR = kL * kNV;  // C columns per tile

  // r[16] rows of 16 floats transposed in place: r[c] holds column c.
  static void transpose16(__m512* r) {
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

  // 16 rows of X from row `row`, columns [c0 + c, c0 + c + 16), widened and transposed: t[i] is
  // column c + i of the 16 rows.
  template <DType D>
  static void rows16(__m512* t, Src s, int64_t row, int64_t col) {
    for (int i = 0; i < 16; ++i) t[i] = load16(s.x + (row + i) * s.ld + col, D);
    transpose16(t);
  }

  // Packs the panels that gemm_packed_common.h describes.
  template <DType D, int64_t W>
  static void pack(float* dst, Src s, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
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
  // C tile [MR, 16 NV] at c (dtype CD, leading dimension ldc) = alpha * sum_k a[k] b[k] + beta
  // * C; beta 0 does not read C; a 16-bit C takes beta 0 or 1 and is rounded once, as from_f32
  // and add_f32_into round. a: [kc, MR] packed, b: [kc, NR] packed (64-byte aligned), of which
  // the first NV vectors are read. kMask: the last vector's C columns are those of `last` only
  // (C's last columns: tiny's 256 are 5 tiles of 48 and one of 16).
  template <DType CD, int NV = kNV, bool kMask = false>
  static void micro(int64_t kc, const float* __restrict a, const float* __restrict b, void* c,
                    int64_t ldc, float alpha, float beta, int lanes = kL) {
    const auto last = static_cast<__mmask16>(lanes == 16 ? 0xFFFF : (1u << lanes) - 1);
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
};

}  // namespace kiri::kernels::cpu::detail::packed
#endif
