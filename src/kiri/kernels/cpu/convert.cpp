// fp32 <-> bf16 / fp16 conversions (whole tensors and the detail:: runs the
// other kernels use), add_into and all_finite. The AVX-512 and AVX2 paths do in
// integer arithmetic exactly what float_to_bf16 does (vcvtneps2bf16 would
// flush denormals) and use vcvtps2ph with round-to-nearest-even for fp16.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/lowp_simd.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {
namespace detail {
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
// GCC 12 warns about the _mm512_undefined_* placeholders inside its own
// conversion intrinsics once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define KIRI_CONVERT_LANES 16
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define KIRI_CONVERT_LANES 8
#endif

// Vectors of kVec lanes: AVX-512's 16 or AVX2's 8 (the scalar loops alone without either).
#if KIRI_CONVERT_LANES == 16
constexpr int64_t kVec = 16;
inline __m512 vload(const void* p, DType dt) {
  return load16(p, dt);
}
inline void vstore(void* p, DType dt, __m512 x) {
  store16(p, dt, x);
}
inline __m512 vloadf(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 vadd(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}
#elif KIRI_CONVERT_LANES == 8
constexpr int64_t kVec = 8;
inline __m256 vload(const void* p, DType dt) {
  return load8(p, dt);
}
inline void vstore(void* p, DType dt, __m256 x) {
  store8(p, dt, x);
}
inline __m256 vloadf(const float* p) {
  return _mm256_loadu_ps(p);
}
inline __m256 vadd(__m256 a, __m256 b) {
  return _mm256_add_ps(a, b);
}
#endif

inline void store_scalar(void* p, DType dt, int64_t i, float f) {
  if (dt == DType::kF32) {
    static_cast<float*>(p)[i] = f;
  } else {
    static_cast<uint16_t*>(p)[i] = dt == DType::kBF16 ? float_to_bf16(f) : float_to_half(f);
  }
}

// The loops below take the dtype as a template argument: with it a run-time value, every
// 16 lanes paid a call to dtype_size and the dtype's branches (1.3x slower widening in a bf16
// step on a CPU without bf16 dot products, where every GEMM operand is widened).
template <DType D>
constexpr int64_t kSize = D == DType::kF32 ? 4 : 2;

template <DType S>
void to_f32_as(float* dst, const void* src, int64_t n) {
  int64_t i = 0;
#ifdef KIRI_CONVERT_LANES
  const char* s = static_cast<const char*>(src);
  for (; i + kVec <= n; i += kVec) vstore(dst + i, DType::kF32, vload(s + i * kSize<S>, S));
#endif
  for (; i < n; ++i) dst[i] = load_as_float(src, S, i);
}

template <DType D>
void from_f32_as(void* dst, const float* src, int64_t n) {
  int64_t i = 0;
#ifdef KIRI_CONVERT_LANES
  char* d = static_cast<char*>(dst);
  for (; i + kVec <= n; i += kVec) vstore(d + i * kSize<D>, D, vloadf(src + i));
#endif
  for (; i < n; ++i) store_scalar(dst, D, i, src[i]);
}

template <DType D>
void add_f32_into_as(void* dst, const float* src, int64_t n) {
  int64_t i = 0;
#ifdef KIRI_CONVERT_LANES
  char* d = static_cast<char*>(dst);
  for (; i + kVec <= n; i += kVec) {
    char* p = d + i * kSize<D>;
    vstore(p, D, vadd(vload(p, D), vloadf(src + i)));
  }
#endif
  for (; i < n; ++i) store_scalar(dst, D, i, load_as_float(dst, D, i) + src[i]);
}

// f(std::integral_constant<DType, D>{}) for F32, BF16 or F16: the dtype as a template argument.
template <typename F>
void with_dtype(DType d, F&& f) {
  switch (d) {
    case DType::kBF16:
      return f(std::integral_constant<DType, DType::kBF16>{});
    case DType::kF16:
      return f(std::integral_constant<DType, DType::kF16>{});
    default:
      return f(std::integral_constant<DType, DType::kF32>{});
  }
}

}  // namespace

void to_f32(float* dst, const void* src, DType sd, int64_t n) {
  with_dtype(sd, [&](auto d) { to_f32_as<decltype(d)::value>(dst, src, n); });
}

void from_f32(void* dst, DType dd, const float* src, int64_t n) {
  with_dtype(dd, [&](auto d) { from_f32_as<decltype(d)::value>(dst, src, n); });
}

void add_f32_into(void* dst, DType dd, const float* src, int64_t n) {
  with_dtype(dd, [&](auto d) { add_f32_into_as<decltype(d)::value>(dst, src, n); });
}

void check_float_dtype(const Tensor& t, const char* op, const char* name) {
  KIRI_CHECK(t.defined(), op, ": ", name, " is undefined");
  const DType d = t.dtype();
  KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op, ": ", name, " ",
             t.shape().str(), " is ", dtype_name(d), ", expected F32, BF16 or F16");
}

}  // namespace detail

namespace {

constexpr int64_t kChunk = 4096;  // elements per parallel piece (a multiple of 16)

// Runs fn(begin, count) over [0, n) in chunks, in parallel when n is large.
template <typename Fn>
void for_chunks(int64_t n, Fn fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

}  // namespace

void convert(Tensor& dst, const Tensor& src) {
  detail::check_float_dtype(dst, "convert", "dst");
  detail::check_float_dtype(src, "convert", "src");
  KIRI_CHECK(dst.numel() == src.numel(), "convert: dst ", dst.shape().str(), " and src ",
             src.shape().str(), " differ in size");
  const DType dd = dst.dtype(), sd = src.dtype();
  const size_t dsz = dtype_size(dd), ssz = dtype_size(sd);
  char* d = static_cast<char*>(dst.raw());
  const char* s = static_cast<const char*>(src.raw());
  for_chunks(src.numel(), [&](int64_t begin, int64_t count) {
    if (dd == sd) {
      std::memcpy(d + begin * dsz, s + begin * ssz, count * dsz);
    } else if (sd == DType::kF32) {
      detail::from_f32(d + begin * dsz, dd, reinterpret_cast<const float*>(s) + begin, count);
    } else if (dd == DType::kF32) {
      detail::to_f32(reinterpret_cast<float*>(d) + begin, s + begin * ssz, sd, count);
    } else {  // bf16 <-> f16, through fp32 (exact on the way in)
      float buf[kChunk];
      detail::to_f32(buf, s + begin * ssz, sd, count);
      detail::from_f32(d + begin * dsz, dd, buf, count);
    }
  });
}

void add_into(Tensor& dst, const Tensor& src) {
  detail::check_float_dtype(dst, "add_into", "dst");
  detail::check_dtype<float>(src, "add_into", "src");
  KIRI_CHECK(dst.numel() == src.numel(), "add_into: dst ", dst.shape().str(), " and src ",
             src.shape().str(), " differ in size");
  const DType dd = dst.dtype();
  char* d = static_cast<char*>(dst.raw());
  const float* s = src.data<float>();
  for_chunks(src.numel(), [&](int64_t begin, int64_t count) {
    detail::add_f32_into(d + begin * dtype_size(dd), dd, s + begin, count);
  });
}

namespace {

// No element has an all-ones exponent (inf or NaN). Integer tests, so they
// vectorise and no floating-point exception is raised.
template <typename U>
bool finite_run(const U* x, int64_t n, U exp_mask) {
  U bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= (x[i] & exp_mask) == exp_mask;
  return !bad;
}

}  // namespace

bool all_finite(const Tensor& x) {
  detail::check_float_dtype(x, "all_finite", "x");
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  bool ok = true;
#pragma omp parallel for schedule(static) reduction(&& : ok) if (n > detail::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    if (x.dtype() == DType::kF32) {
      ok = ok && finite_run(static_cast<const uint32_t*>(x.raw()) + begin, count, 0x7f800000u);
    } else {
      const uint16_t mask = x.dtype() == DType::kBF16 ? 0x7f80 : 0x7c00;
      ok = ok && finite_run(static_cast<const uint16_t*>(x.raw()) + begin, count, mask);
    }
  }
  return ok;
}

}  // namespace kiri::kernels::cpu
