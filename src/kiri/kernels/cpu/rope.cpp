// Rotary position embedding in Hugging Face's rotate-half form, and Llama 3's
// frequency scaling (transformers' _compute_llama3_parameters, formula for formula).
#include <cmath>
#include <cstdint>
#include <numbers>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {

using detail::check_dtype;

std::vector<double> rope_inv_freq(int64_t head_dim, const RopeParams& p) {
  KIRI_CHECK(head_dim >= 2 && head_dim % 2 == 0, "rope_inv_freq: the head dimension ", head_dim,
             " must be even (columns turn in pairs)");
  KIRI_CHECK(p.theta > 0, "rope_inv_freq: theta must be > 0, got ", p.theta);
  const int64_t h = head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(h));
  for (int64_t i = 0; i < h; ++i)
    inv[i] = 1.0 / std::pow(p.theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  if (!p.llama3) return inv;
  KIRI_CHECK(p.factor >= 1 && p.low_freq_factor > 0 && p.high_freq_factor > p.low_freq_factor &&
                 p.original_max_position_embeddings >= 1,
             "rope_inv_freq: llama3 scaling needs factor >= 1, 0 < low_freq_factor < "
             "high_freq_factor and original_max_position_embeddings >= 1, got factor ",
             p.factor, ", low_freq_factor ", p.low_freq_factor, ", high_freq_factor ",
             p.high_freq_factor, ", original_max_position_embeddings ",
             p.original_max_position_embeddings);
  const double old_len = p.original_max_position_embeddings;
  const double low_wavelen = old_len / p.low_freq_factor;    // longer: slowed by factor
  const double high_wavelen = old_len / p.high_freq_factor;  // shorter: kept
  for (double& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      f /= p.factor;
    } else if (wavelen >= high_wavelen) {  // between: interpolated
      const double s =
          (old_len / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
      f = (1 - s) * f / p.factor + s * f;
    }
  }
  return inv;
}

template <typename T>
void rope_table(Tensor& cos, Tensor& sin, const std::vector<double>& inv_freq) {
  const int64_t h = static_cast<int64_t>(inv_freq.size());
  check_dtype<T>(cos, "rope_table", "cos");
  KIRI_CHECK(cos.rank() == 2 && cos.dim(1) == h, "rope_table: cos must be [P, ", h, "], got ",
             cos.shape().str());
  detail::check_tensor<T>(sin, cos.shape(), "rope_table", "sin");
  const int64_t P = cos.dim(0);
  T* c = cos.data<T>();  // [P, h]
  T* s = sin.data<T>();  // [P, h]
  for (int64_t t = 0; t < P; ++t)
    for (int64_t i = 0; i < h; ++i) {
      const double a = static_cast<double>(t) * inv_freq[i];
      c[t * h + i] = static_cast<T>(std::cos(a));
      s[t * h + i] = static_cast<T>(std::sin(a));
    }
}

namespace {

struct RopeDims {
  int64_t B, T, W, h;  // W = H * hs columns, h = hs / 2
};

template <typename T>
RopeDims check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const char* op,
                    const char* name) {
  check_dtype<T>(x, op, name);
  check_dtype<T>(cos, op, "cos");
  detail::check_tensor<T>(sin, cos.shape(), op, "sin");
  KIRI_CHECK(x.rank() == 3 && cos.rank() == 2, op, ": ", name, " must be [B, T, H*hs] and cos ",
             "[P, hs/2], got ", x.shape().str(), " and ", cos.shape().str());
  const RopeDims d{x.dim(0), x.dim(1), x.dim(2), cos.dim(1)};
  KIRI_CHECK(d.h > 0 && d.W % (2 * d.h) == 0, op, ": ", name, " ", x.shape().str(),
             " is not made of heads of 2 x ", d.h, " columns");
  KIRI_CHECK(d.T <= cos.dim(0), op, ": ", d.T, " positions but the table has ", cos.dim(0));
  return d;
}

// Each row of y = the rotation of x by +angle (sign 1) or -angle (sign -1);
// accumulate: y += instead of y =.
template <typename T>
void rotate(T* y, const T* x, const T* cs, const T* sn, const RopeDims& d, T sign,
            bool accumulate) {
  const int64_t heads = d.W / (2 * d.h), rows = d.B * d.T;
#pragma omp parallel for schedule(static) if (rows * d.W > detail::kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const T* c = cs + (r % d.T) * d.h;
    const T* s = sn + (r % d.T) * d.h;
    for (int64_t hd = 0; hd < heads; ++hd) {
      const T* a = x + r * d.W + hd * 2 * d.h;
      T* o = y + r * d.W + hd * 2 * d.h;
#pragma omp simd
      for (int64_t i = 0; i < d.h; ++i) {
        const T x1 = a[i], x2 = a[i + d.h], si = sign * s[i];
        const T y1 = x1 * c[i] - x2 * si, y2 = x2 * c[i] + x1 * si;
        o[i] = accumulate ? o[i] + y1 : y1;
        o[i + d.h] = accumulate ? o[i + d.h] + y2 : y2;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(Tensor& out, const Tensor& inp, const Tensor& cos, const Tensor& sin) {
  const RopeDims d = check_rope<T>(inp, cos, sin, "rope_forward", "inp");
  detail::check_tensor<T>(out, inp.shape(), "rope_forward", "out");
  rotate(out.data<T>(), inp.data<T>(), cos.data<T>(), sin.data<T>(), d, T(1), false);
}

template <typename T>
void rope_backward(Tensor& dinp, const Tensor& dout, const Tensor& cos, const Tensor& sin) {
  const RopeDims d = check_rope<T>(dout, cos, sin, "rope_backward", "dout");
  detail::check_tensor<T>(dinp, dout.shape(), "rope_backward", "dinp");
  // The rotation is orthogonal: its transpose turns by -angle.
  rotate(dinp.data<T>(), dout.data<T>(), cos.data<T>(), sin.data<T>(), d, T(-1), true);
}

template void rope_table<float>(Tensor&, Tensor&, const std::vector<double>&);
template void rope_table<double>(Tensor&, Tensor&, const std::vector<double>&);
template void rope_forward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_forward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_backward<float>(Tensor&, const Tensor&, const Tensor&, const Tensor&);
template void rope_backward<double>(Tensor&, const Tensor&, const Tensor&, const Tensor&);

}  // namespace kiri::kernels::cpu
