// AdamW update and the sum of squares used for gradient-norm clipping.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;

namespace {

struct AdamWConsts {
  float step_size, inv_sqrt_bc2, decay, b1, b2, eps, gs;
};

// Elements [0, n) of one chunk; g is fp32 whatever the gradient's dtype, so
// every dtype runs this same code and gets bitwise the same result.
void adamw_chunk(float* w, const float* g, float* mm, float* vv, int64_t n, const AdamWConsts& k) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.gs;
    const float mi = k.b1 * mm[i] + (1.0f - k.b1) * gi;
    const float vi = k.b2 * vv[i] + (1.0f - k.b2) * gi * gi;
    mm[i] = mi;
    vv[i] = vi;
    w[i] = w[i] * k.decay - k.step_size * mi / (std::sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
  }
}

void check_adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWParams& p, const Tensor* lowp_param) {
  const char* op = "adamw_update";
  check_dtype<float>(param, op, "param");
  detail::check_float_dtype(grad, op, "grad");
  check_dtype<float>(m, op, "m");
  check_dtype<float>(v, op, "v");
  const int64_t n = param.numel();
  KIRI_CHECK(grad.numel() == n && m.numel() == n && v.numel() == n, op, ": param ",
             param.shape().str(), ", grad ", grad.shape().str(), ", m ", m.shape().str(), ", v ",
             v.shape().str(), " must have the same number of elements");
  if (lowp_param) {
    KIRI_CHECK(
        lowp_param->defined() && detail::is_lowp(lowp_param->dtype()) && lowp_param->numel() == n,
        op, ": lowp_param must be BF16 or F16 with ", n, " elements");
  }
  KIRI_CHECK(p.step >= 1, op, ": step ", p.step, " must be >= 1 (1-based)");
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& p,
                  Tensor* lowp_param) {
  check_adamw(param, grad, m, v, p, lowp_param);
  const int64_t n = param.numel();
  float* w = param.data<float>();  // [n]
  float* mm = m.data<float>();     // [n]
  float* vv = v.data<float>();     // [n]
  // As PyTorch: p *= 1 - lr*wd; p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
  const AdamWConsts k{static_cast<float>(p.lr / bc1),
                      static_cast<float>(1.0 / std::sqrt(bc2)),
                      1.0f - p.lr * p.weight_decay,
                      p.beta1,
                      p.beta2,
                      p.eps,
                      p.grad_scale};
  const DType gd = grad.dtype();
  char* g = static_cast<char*>(grad.raw());  // [n] of gd
  const int64_t gsz = static_cast<int64_t>(dtype_size(gd));
  constexpr int64_t kChunk = 2048;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    float buf[kChunk];
    const float* gc = reinterpret_cast<const float*>(g) + begin;
    if (gd != DType::kF32) {
      detail::to_f32(buf, g + begin * gsz, gd, count);
      gc = buf;
    }
    adamw_chunk(w + begin, gc, mm + begin, vv + begin, count, k);
    // The gradient's lines were just read: zeroing them here costs their write-back only.
    if (p.zero_grad) std::memset(g + begin * gsz, 0, static_cast<size_t>(count * gsz));
    if (lowp_param) {
      const DType ld = lowp_param->dtype();
      char* dst = static_cast<char*>(lowp_param->raw()) + begin * dtype_size(ld);
      detail::from_f32(dst, ld, w + begin, count);
    }
  }
}

namespace {

constexpr int64_t kSumChunk = 1 << 16;

// The sum of squares of x[begin, end) in double: the one loop every chunk's partial sum
// comes from (its vector lanes and their order are the compiler's, the same for every call).
template <typename T>
double chunk_sum_of_squares(const T* x, int64_t begin, int64_t end) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(x[i]) * x[i];
  return acc;
}

// Four whole chunks at once, x[0, 4 * kSumChunk): each accumulator is chunk_sum_of_squares's
// over its chunk (the same lanes, in the same order: the same bits, tests/kernels/
// adamw_test.cpp), with four independent chains of adds in flight where one chunk's loop
// waits on the add's latency and falls short of the memory's rate.
template <typename T>
void four_chunk_sums_of_squares(const T* x, double* out) {
  const T *x0 = x, *x1 = x + kSumChunk, *x2 = x + 2 * kSumChunk, *x3 = x + 3 * kSumChunk;
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
  for (int64_t i = 0; i < kSumChunk; ++i) {
    a0 += static_cast<double>(x0[i]) * x0[i];
    a1 += static_cast<double>(x1[i]) * x1[i];
    a2 += static_cast<double>(x2[i]) * x2[i];
    a3 += static_cast<double>(x3[i]) * x3[i];
  }
  out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3;
}

// Sum of squares of x[n] in double, in fixed chunks whose partial sums are
// added in order: the result does not depend on the thread count. 16-bit
// inputs (dt BF16 or F16, T = uint16_t) are widened a block at a time.
template <typename T>
double sum_of_squares_impl(const T* x, int64_t n, DType dt = dtype_of<T>()) {
  constexpr int64_t kChunk = kSumChunk, kGroup = 4;
  const int64_t chunks = (n + kChunk - 1) / kChunk, whole = n / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));  // [chunks]
  // Groups of four chunks, each group on one thread.
  const int64_t groups = (chunks + kGroup - 1) / kGroup;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t q = 0; q < groups; ++q) {
    const int64_t first = q * kGroup;
    if constexpr (!std::is_same_v<T, uint16_t>) {
      if (first + kGroup <= whole) {
        four_chunk_sums_of_squares(x + first * kChunk, partial.data() + first);
        continue;
      }
    }
    for (int64_t c = first; c < std::min(chunks, first + kGroup); ++c) {
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      double acc = 0;
      if constexpr (std::is_same_v<T, uint16_t>) {
        constexpr int64_t kBlock = 1024;
        float buf[kBlock];
        for (int64_t b = begin; b < end; b += kBlock) {
          const int64_t w = std::min(kBlock, end - b);
          detail::to_f32(buf, x + b, dt, w);
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < w; ++i) acc += static_cast<double>(buf[i]) * buf[i];
        }
      } else {
        acc = chunk_sum_of_squares(x, begin, end);
      }
      partial[c] = acc;
    }
  }
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  KIRI_CHECK(x.defined(), "sum_of_squares: tensor is undefined");
  if (x.dtype() == DType::kF32) return sum_of_squares_impl(x.data<float>(), x.numel());
  if (detail::is_lowp(x.dtype()))
    return sum_of_squares_impl(static_cast<const uint16_t*>(x.raw()), x.numel(), x.dtype());
  KIRI_CHECK(x.dtype() == DType::kF64, "sum_of_squares: tensor ", x.shape().str(), " is ",
             dtype_name(x.dtype()), ", expected F32, F64, BF16 or F16");
  return sum_of_squares_impl(x.data<double>(), x.numel());
}

}  // namespace kiri::kernels::cpu
