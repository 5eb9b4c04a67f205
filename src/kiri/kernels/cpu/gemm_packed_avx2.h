#pragma once
// Internal to gemm_packed.cpp: the AVX2 packers and micro-kernel (gemm_packed_common.h says
// what each ISA header defines), for CPUs with FMA but no AVX-512 (AMD Zen 2 and 3, Intel
// before Skylake-SP). A 4 x 24 tile of C: 12 ymm accumulators, 3 of B and one broadcast of A,
// which is all 16 registers; per k, 3 loads of B, 4 broadcasts and 12 FMAs. A micro-panel of
// A is 4 wide, half a vector, as AVX-512's is 8: the packers are the same shapes at half the
// width.
#include <immintrin.h>

#include <cstring>

#include "kiri/kernels/cpu/gemm_packed_common.h"
#include "kiri/kernels/cpu/lowp_simd.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
namespace kiri::kernels::cpu::detail::packed {

struct Avx2 {
  static constexpr int64_t kL = 8;
  static constexpr int64_t kMR = 4;         // C rows per tile
  static constexpr int64_t kNV = 3;         // C columns per tile, in 8-float vectors
  static constexpr int64_t kNR = kL * kNV;  // C columns per tile

  // r[8] rows of 8 floats transposed in place: r[c] holds column c.
  static void transpose8(__m256* r) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; ++g) {  // rows 4g..4g+3: columns 4h+q in u[4g+q], 128-bit half h
      const __m256* s = t + 4 * g;
      u[4 * g + 0] = _mm256_shuffle_ps(s[0], s[2], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * g + 1] = _mm256_shuffle_ps(s[0], s[2], _MM_SHUFFLE(3, 2, 3, 2));
      u[4 * g + 2] = _mm256_shuffle_ps(s[1], s[3], _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * g + 3] = _mm256_shuffle_ps(s[1], s[3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int q = 0; q < 4; ++q) {
      r[q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x20);
      r[4 + q] = _mm256_permute2f128_ps(u[q], u[4 + q], 0x31);
    }
  }

  // 8 rows of X from row `row`, columns [col, col + 8), widened and transposed: t[i] is column
  // col + i of the 8 rows.
  template <DType D>
  static void rows8(__m256* t, Src s, int64_t row, int64_t col) {
    for (int i = 0; i < 8; ++i) t[i] = load8(s.x + (row + i) * s.ld + col, D);
    transpose8(t);
  }

  // 4 lanes of a 16-bit run, widened.
  template <DType D>
  static __m128 load4(const uint16_t* p) {
    const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    if constexpr (D == DType::kF16) return _mm_cvtph_ps(h);
    return _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
  }

  // The first `lanes` of 8 at p (the rest read as zeros) and the same lanes written back: C's
  // last columns, where a whole vector would run past the row.
  static __m256 load_part(const void* p, DType dt, int lanes) {
    alignas(32) char buf[32] = {};
    std::memcpy(buf, p, static_cast<size_t>(lanes) * dtype_size(dt));
    return load8(buf, dt);
  }
  static void store_part(void* p, DType dt, __m256 x, int lanes) {
    alignas(32) char buf[32];
    store8(buf, dt, x);
    std::memcpy(p, buf, static_cast<size_t>(lanes) * dtype_size(dt));
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
          if constexpr (W == 4)
            _mm_store_ps(out + c * W, load4<D>(in));
          else
            for (int64_t v = 0; v < W; v += 8) _mm256_store_ps(out + c * W + v, load8(in + v, D));
        }
      } else if (!s.trans && W % 8 == 0 && pr == W) {
        // X(r, c) = x[r * ld + c]: 8 rows x 8 columns transposed at a time, 8 rows along their
        // length before the next 8.
        const int64_t vec_cols = cols / 8 * 8;
        for (int64_t v = 0; v < W; v += 8)
          for (c = 0; c < vec_cols; c += 8) {
            __m256 t[8];
            rows8<D>(t, s, pr0 + v, c0 + c);
            for (int i = 0; i < 8; ++i) _mm256_store_ps(out + (c + i) * W + v, t[i]);
          }
      } else if (!s.trans && W == 4 && left >= 8) {
        // Two 4-row panels from one 8 x 8 transpose: the low half of each column to panel p,
        // the high half to panel p + 1.
        float* next = out + cols * W;
        for (; c + 8 <= cols; c += 8) {
          __m256 t[8];
          rows8<D>(t, s, pr0, c0 + c);
          for (int i = 0; i < 8; ++i) {
            _mm_store_ps(out + (c + i) * W, _mm256_castps256_ps128(t[i]));
            _mm_store_ps(next + (c + i) * W, _mm256_extractf128_ps(t[i], 1));
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

  // C tile [MR, 8 NV] at c (dtype CD, leading dimension ldc) = alpha * sum_k a[k] b[k] + beta
  // * C, as Avx512::micro computes it: beta 0 does not read C; a 16-bit C takes beta 0 or 1
  // and is rounded once. a: [kc, MR] packed, b: [kc, NR] packed (32-byte aligned), of which
  // the first NV vectors are read. kMask: the last vector's C columns are its first `lanes`.
  template <DType CD, int NV = kNV, bool kMask = false>
  static void micro(int64_t kc, const float* __restrict a, const float* __restrict b, void* c,
                    int64_t ldc, float alpha, float beta, int lanes = kL) {
    __m256 acc[kMR][NV];
#pragma GCC unroll 4
    for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; ++k) {
      __m256 bv[NV];
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        bv[v] = _mm256_load_ps(b + v * 8);
        // Held in a register: GCC otherwise folds each load into all 4 of its FMAs, 12 loads
        // of B per k where 3 do, and the load ports (2 vector loads a cycle on Zen 3) bound
        // the kernel at 72% of the FMA peak.
        __asm__("" : "+x"(bv[v]));
      }
#pragma GCC unroll 4
      for (int i = 0; i < kMR; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
      }
      a += kMR;
      b += kNR;
    }
    const __m256 al = _mm256_set1_ps(alpha), be = _mm256_set1_ps(beta);
    char* cb = static_cast<char*>(c);
#pragma GCC unroll 4
    for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        char* p = cb + (i * ldc + v * 8) * kSize<CD>;
        const __m256 s = alpha == 1.0f ? acc[i][v] : _mm256_mul_ps(al, acc[i][v]);
        if (kMask && v == NV - 1) {
          const __m256 old = beta == 0.0f ? s : load_part(p, CD, lanes);
          store_part(p, CD,
                     beta == 0.0f        ? s
                     : CD == DType::kF32 ? _mm256_fmadd_ps(be, old, s)
                                         : _mm256_add_ps(old, s),
                     lanes);
        } else if constexpr (CD == DType::kF32) {
          float* f = reinterpret_cast<float*>(p);
          _mm256_storeu_ps(f, beta == 0.0f ? s : _mm256_fmadd_ps(be, _mm256_loadu_ps(f), s));
        } else {
          store8(p, CD, beta == 0.0f ? s : _mm256_add_ps(load8(p, CD), s));
        }
      }
  }
};

}  // namespace kiri::kernels::cpu::detail::packed
#endif
