#pragma once
// Internal to the CPU kernels: 16 lanes of F32, BF16 or F16 loaded as fp32 and stored from it,
// rounded as float_to_bf16 / float_to_half round (convert.cpp's loops, gemm_packed.cpp's C
// tiles). AVX-512 only: include under the guard below.
#include <immintrin.h>

#include "kiri/tensor/dtype.h"

#if defined(__AVX512F__) && defined(__AVX512BW__)
namespace kiri::kernels::cpu::detail {

inline __m512 load16(const void* p, DType dt) {
  if (dt == DType::kF32) return _mm512_loadu_ps(p);
  const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  if (dt == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// float_to_bf16 on 16 lanes: NaN -> (u >> 16) | 0x40, else round half to even.
inline __m256i f32_to_bf16x16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}

inline void store16(void* p, DType dt, __m512 x) {
  if (dt == DType::kF32) return _mm512_storeu_ps(p, x);
  const __m256i h = dt == DType::kF16
                        ? _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : f32_to_bf16x16(x);
  _mm256_storeu_si256(static_cast<__m256i*>(p), h);
}

#if defined(__AVX512VL__)
// The same for the lanes of mask m only: the others are not read (zero) and not written.
inline __m512 load16_masked(const void* p, DType dt, __mmask16 m) {
  if (dt == DType::kF32) return _mm512_maskz_loadu_ps(m, p);
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (dt == DType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline void store16_masked(void* p, DType dt, __m512 x, __mmask16 m) {
  if (dt == DType::kF32) return _mm512_mask_storeu_ps(p, m, x);
  const __m256i h = dt == DType::kF16
                        ? _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : f32_to_bf16x16(x);
  _mm256_mask_storeu_epi16(p, m, h);
}
#endif

}  // namespace kiri::kernels::cpu::detail
#endif
