#pragma once
// Helpers for the kernel tests: random tensors, the loss L = sum(out * R),
// and the central finite-difference gradient check in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>

#include "kiri/base/rng.h"
#include "kiri/tensor/tensor.h"

namespace kiri::test {

inline Allocator& allocator() {
  static Allocator a;
  return a;
}

inline Tensor empty(const Shape& shape, DType dtype = DType::kF64) {
  return Tensor::empty(shape, dtype, Category::kOther, allocator());
}

inline Tensor zeros(const Shape& shape, DType dtype = DType::kF64) {
  return Tensor::zeros(shape, dtype, Category::kOther, allocator());
}

// Normal(0, scale^2) values from (seed 1234, stream), converted to dtype.
inline Tensor randn(const Shape& shape, uint64_t stream, double scale = 1.0,
                    DType dtype = DType::kF64) {
  Tensor d = empty(shape);
  double* p = d.data<double>();
  for (int64_t i = 0; i < d.numel(); ++i) p[i] = scale * random_normal(1234, stream, i);
  if (dtype == DType::kF64) return d;
  Tensor t = empty(shape, dtype);
  t.copy_from(d);
  return t;
}

// A copy in another dtype (or the same).
inline Tensor convert(const Tensor& src, DType dtype) {
  Tensor t = empty(src.shape(), dtype);
  t.copy_from(src);
  return t;
}

inline Tensor clone(const Tensor& src) {
  return convert(src, src.dtype());
}

// sum(a * b) over double tensors of the same numel.
inline double dot(const Tensor& a, const Tensor& b) {
  const double* x = a.data<double>();
  const double* y = b.data<double>();
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += x[i] * y[i];
  return s;
}

// a - b (double).
inline Tensor minus(const Tensor& a, const Tensor& b) {
  Tensor t = clone(a);
  double* p = t.data<double>();
  const double* q = b.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] -= q[i];
  return t;
}

// Compares analytic[i] with (L(x + h e_i) - L(x - h e_i)) / 2h for every
// element of the double tensor x. The error is relative, with a floor of
// 1e-2 on the scale so that tiny gradients are compared absolutely.
inline void expect_grad_matches_fd(Tensor& x, const Tensor& analytic,
                                   const std::function<double()>& loss, const std::string& name,
                                   double tol = 1e-6, double h = 1e-6) {
  ASSERT_EQ(x.numel(), analytic.numel()) << name;
  double* p = x.data<double>();
  const double* a = analytic.data<double>();
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double lp = loss();
    p[i] = saved - h;
    const double lm = loss();
    p[i] = saved;
    const double fd = (lp - lm) / (2 * h);
    const double err = std::abs(a[i] - fd) / std::max({std::abs(a[i]), std::abs(fd), 1e-2});
    if (err > worst) worst = err, worst_i = i;
    EXPECT_LT(err, tol) << name << "[" << i << "]: analytic " << a[i] << ", finite difference "
                        << fd;
  }
  std::ostringstream worst_text;
  worst_text << worst << " at " << worst_i;
  ::testing::Test::RecordProperty(name + "_worst_rel_err", worst_text.str());
}

// max |a - b| / max |b| over tensors of any float dtype (read as double).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::abs(a.item(i) - b.item(i)));
    scale = std::max(scale, std::abs(b.item(i)));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace kiri::test
