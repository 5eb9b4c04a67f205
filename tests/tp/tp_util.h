#pragma once
// Helpers for the tensor-parallel tests: deterministic tensors every rank
// builds alike (so each can compute the one-process reference itself), and
// TEST triples that run one body on 1, 2 and 4 ranks (threads, or the MPI
// world of that size).
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/harness.h"
#include "kiri/base/rng.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel::tp::testing {

inline Allocator& allocator() {
  static Allocator a;  // thread-safe; shared by the rank threads
  return a;
}

inline Tensor empty(const Shape& shape, DType dtype = DType::kF32) {
  return Tensor::empty(shape, dtype, Category::kOther, allocator());
}

// Normal(0, scale^2) values of (seed 7, stream), converted to dtype.
inline Tensor randn(const Shape& shape, uint64_t stream, double scale = 1.0,
                    DType dtype = DType::kF32) {
  Tensor d = empty(shape, DType::kF64);
  double* p = d.data<double>();
  for (int64_t i = 0; i < d.numel(); ++i) p[i] = scale * random_normal(7, stream, i);
  Tensor t = empty(shape, dtype);
  t.copy_from(d);
  return t;
}

inline Tensor ints(const Shape& shape, const std::vector<int32_t>& values) {
  Tensor t = empty(shape, DType::kI32);
  KIRI_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "ints: ", values.size(),
             " values for ", shape.str());
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Uniform integers in [lo, hi) of (seed 7, stream).
inline std::vector<int32_t> random_ints(int64_t n, int32_t lo, int32_t hi, uint64_t stream) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        lo + static_cast<int32_t>(random_uniform(7, stream, i) * static_cast<double>(hi - lo));
  return v;
}

inline Tensor clone(const Tensor& src) {
  Tensor t = empty(src.shape(), src.dtype());
  t.copy_from(src);
  return t;
}

// Columns [c0, c1) of a 2-D tensor, as a new contiguous tensor.
inline Tensor columns(const Tensor& src, int64_t c0, int64_t c1) {
  const int64_t N = src.dim(0), C = src.dim(1), w = c1 - c0;
  Tensor t = empty({N, w}, src.dtype());
  const size_t es = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(t.raw());
  for (int64_t i = 0; i < N; ++i)
    std::memcpy(d + i * w * es, s + (i * C + c0) * es, static_cast<size_t>(w) * es);
  return t;
}

// Ranks share the cores: one OpenMP thread each.
inline void one_thread_per_rank() {
  omp_set_num_threads(1);
}

}  // namespace kiri::parallel::tp::testing

// TEST(suite, name##OnOneRank/OnTwoRanks/OnFourRanks), each running
// body(Communicator& tp) on that many ranks.
#define KIRI_TP_TESTS(suite, name, body) \
  TEST(suite, name##OnOneRank) {         \
    KIRI_RUN_RANKS(1, body);             \
  }                                      \
  TEST(suite, name##OnTwoRanks) {        \
    KIRI_RUN_RANKS(2, body);             \
  }                                      \
  TEST(suite, name##OnFourRanks) {       \
    KIRI_RUN_RANKS(4, body);             \
  }
