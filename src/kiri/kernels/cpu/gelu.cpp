// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3).
// Evaluated as x * sigmoid(2u) (the same function: 0.5(1 + tanh u) =
// 1 / (1 + exp(-2u))), which avoids the cancellation in 1 + tanh(u) for
// negative x and needs a single exp.
//
// The fused variants serve GPT-2's MLP (c_fc, GELU, c_proj): gelu_forward may round straight
// into the 16-bit copy that c_proj's GEMM reads, and gelu_backward_bias writes c_fc's output
// gradient (16-bit where its GEMMs take it so) while summing the bias gradient from it, instead
// of a zeroed buffer, an accumulate, a column-sum pass and a conversion pass.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/cpu/vmath.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;
using detail::exp_fast;

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// exp(-2u), its argument clamped to [-80, 80] so that 1 / (1 + e) stays a
// normal float (no slow subnormals); past the clamp GELU is 0 or x to within
// 1e-34.
template <typename T>
inline T exp_minus_2u(T x) {
  T a = T(-2 * kSqrt2OverPi) * (x + T(kCubic) * x * x * x);
  a = a < T(-80) ? T(-80) : a;
  a = a > T(80) ? T(80) : a;
  return exp_fast(a);
}

template <typename T>
inline T gelu(T x) {
  return x / (T(1) + exp_minus_2u(x));
}

// GELU'(x) * g. With s = sigmoid(2u) = 1 / (1 + e), e = exp(-2u):
// d/dx = s + 2 x s (1 - s) u', 1 - s = e s, u' = sqrt(2/pi)(1 + 3 * 0.044715 x^2).
template <typename T>
inline T gelu_grad(T x, T g) {
  const T e = exp_minus_2u(x);
  const T s = T(1) / (T(1) + e);
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
  // (2 x u') (e s) s: in this order no factor overflows for large |x|.
  return g * (s + T(2) * x * du * (e * s) * s);
}

// Elements per piece of the 16-bit forward (fp32 values in a stack buffer, then rounded).
constexpr int64_t kPiece = 2048;

// out (BF16 or F16) = round(GELU(x)), piece by piece.
void gelu_forward_lowp(Tensor& out, const float* x, int64_t n) {
  const DType dt = out.dtype();
  auto* o = static_cast<uint16_t*>(out.raw());  // [n]
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t b = p * kPiece, e = std::min(n, b + kPiece);
    float buf[kPiece];  // [e - b]
#pragma omp simd
    for (int64_t i = b; i < e; ++i) buf[i - b] = gelu(x[i]);
    detail::from_f32(o + b, dt, buf, e - b);
  }
}

}  // namespace

template <typename T>
void gelu_forward(Tensor& out, const Tensor& inp) {
  check_dtype<T>(inp, "gelu_forward", "inp");
  const T* x = inp.data<T>();  // [n]
  const int64_t n = inp.numel();
  if constexpr (std::is_same_v<T, float>) {
    if (out.defined() && detail::is_lowp(out.dtype())) {
      KIRI_CHECK(out.shape() == inp.shape(), "gelu_forward: out has shape ", out.shape().str(),
                 ", expected ", inp.shape().str());
      return gelu_forward_lowp(out, x, n);
    }
  }
  detail::check_tensor<T>(out, inp.shape(), "gelu_forward", "out");
  T* o = out.data<T>();  // [n]
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) o[i] = gelu(x[i]);
}

template <typename T>
void gelu_backward(Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  check_dtype<T>(inp, "gelu_backward", "inp");
  detail::check_tensor<T>(dinp, inp.shape(), "gelu_backward", "dinp");
  detail::check_tensor<T>(dout, inp.shape(), "gelu_backward", "dout");
  const T* x = inp.data<T>();   // [n]
  const T* g = dout.data<T>();  // [n]
  T* dx = dinp.data<T>();       // [n]
  const int64_t n = inp.numel();
#pragma omp parallel for simd schedule(static) if (n > detail::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) dx[i] += gelu_grad(x[i], g[i]);
}

template <typename T>
void gelu_backward_bias(Tensor& dinp, Tensor& dbias, const Tensor& inp, const Tensor& dout) {
  const char* op = "gelu_backward_bias";
  check_dtype<T>(inp, op, "inp");
  const int64_t C = detail::last_dim(inp, op, "inp"), N = detail::rows_of(inp);
  detail::check_matrix<T>(dout, N, C, op, "dout");
  detail::check_tensor<T>(dbias, Shape{C}, op, "dbias");
  const bool lowp = dinp.defined() && detail::is_lowp(dinp.dtype());
  if (lowp) {
    KIRI_CHECK((std::is_same_v<T, float> && dinp.shape() == inp.shape()), op, ": a ",
               dtype_name(dinp.dtype()), " dinp must have inp's shape ", inp.shape().str(),
               " (F32 inp), got ", dinp.shape().str());
  } else {
    detail::check_tensor<T>(dinp, inp.shape(), op, "dinp");
  }
  const T* x = inp.data<T>();   // [N, C]
  const T* g = dout.data<T>();  // [N, C]
  T* db = dbias.data<T>();      // [C]
  const DType dt = dinp.dtype();
  T* d = lowp ? nullptr : dinp.data<T>();                           // [N, C]
  auto* d16 = lowp ? static_cast<uint16_t*>(dinp.raw()) : nullptr;  // [N, C]
  // Each thread owns a range of columns (whole 16-column blocks) and walks the rows in order,
  // so every column's sum is in row order in double as add_column_sums takes it, whatever the
  // thread count; with one thread the walk is row-major.
  const int64_t blocks = (C + 15) / 16;
#pragma omp parallel if (N * C > detail::kMinParallelWork)
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t c0 = std::min(C, blocks * tid / nt * 16);
    const int64_t c1 = std::min(C, blocks * (tid + 1) / nt * 16), w = c1 - c0;
    std::vector<double> acc(w, 0.0);   // [w] column sums
    std::vector<T> row(lowp ? w : 0);  // [w] fp32 values before rounding
    for (int64_t i = 0; i < N && w > 0; ++i) {
      const T* xi = x + i * C + c0;
      const T* gi = g + i * C + c0;
      // 0 + v, as gelu_backward into a zeroed buffer (a -0 gradient becomes +0 there too).
      T* vi = lowp ? row.data() : d + i * C + c0;
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) vi[j] = T(0) + gelu_grad(xi[j], gi[j]);
      for (int64_t j = 0; j < w; ++j) acc[j] += static_cast<double>(vi[j]);
      if constexpr (std::is_same_v<T, float>)
        if (lowp) detail::from_f32(d16 + i * C + c0, dt, vi, w);
    }
    for (int64_t j = 0; j < w; ++j) db[c0 + j] += static_cast<T>(acc[j]);
  }
}

template void gelu_forward<float>(Tensor&, const Tensor&);
template void gelu_forward<double>(Tensor&, const Tensor&);
template void gelu_backward<float>(Tensor&, const Tensor&, const Tensor&);
template void gelu_backward<double>(Tensor&, const Tensor&, const Tensor&);
template void gelu_backward_bias<float>(Tensor&, Tensor&, const Tensor&, const Tensor&);
template void gelu_backward_bias<double>(Tensor&, Tensor&, const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
