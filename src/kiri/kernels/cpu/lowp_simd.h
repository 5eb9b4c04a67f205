#pragma once
// Internal to the CPU kernels: 16 lanes (AVX-512) or 8 lanes (AVX2) of F32, BF16 or F16 loaded
// as fp32 and stored from it, rounded as float_to_bf16 / float_to_half round (convert.cpp's
// loops, gemm_packed's panels and C tiles). Each set is defined only where the compiler
// targets its instructions: use them under the same guards.
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

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
namespace kiri::kernels::cpu::detail {

inline __m256 load8(const void* p, DType dt) {
  if (dt == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
  if (dt == DType::kF16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// float_to_bf16 on 8 lanes, as f32_to_bf16x16: NaN -> (u >> 16) | 0x40, else round half to
// even. The rounded values fit 16 bits, so an unsigned saturating pack narrows them exactly.
inline __m128i f32_to_bf16x8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  // |u| > inf's bits: a signed compare is right, both sides are below 2^31.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
  // packus works within 128-bit halves: lanes 0-3 land in qword 0, lanes 4-7 in qword 2.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

inline void store8(void* p, DType dt, __m256 x) {
  if (dt == DType::kF32) return _mm256_storeu_ps(static_cast<float*>(p), x);
  const __m128i h = dt == DType::kF16
                        ? _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : f32_to_bf16x8(x);
  _mm_storeu_si128(static_cast<__m128i*>(p), h);
}

}  // namespace kiri::kernels::cpu::detail
#endif
