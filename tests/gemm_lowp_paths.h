#pragma once
// Running a low-precision test through each gemm_lowp path (oneDNN's matmul
// on the 16-bit data, the fp32-panel path and the packed kernel) on any machine: TEST_P over
// kGemmLowpPaths, KIRI_USE_GEMM_LOWP(path, dtype) first in the body.
#include <gtest/gtest.h>

#include <string>

#include "kiri/kernels/ops.h"

namespace kiri::test {

// Sets the process-wide path for the test's lifetime and restores the one
// before (which may have come from KIRI_GEMM_LOWP).
class ScopedGemmLowp {
 public:
  explicit ScopedGemmLowp(kernels::LowpGemmImpl impl) : saved_(kernels::gemm_lowp_impl()) {
    kernels::set_gemm_lowp_impl(impl);
  }
  ~ScopedGemmLowp() { kernels::set_gemm_lowp_impl(saved_); }
  ScopedGemmLowp(const ScopedGemmLowp&) = delete;
  ScopedGemmLowp& operator=(const ScopedGemmLowp&) = delete;

 private:
  kernels::LowpGemmImpl saved_;
};

// Why `impl` cannot run `ab` here ("" when it can).
inline std::string gemm_lowp_unavailable(kernels::LowpGemmImpl impl, DType ab) {
  if (kernels::gemm_lowp_available(impl, ab)) return "";
  if (impl == kernels::LowpGemmImpl::kPacked)
    return "this build has no packed kernel (neither AVX-512 nor AVX2 with FMA; it would fall "
           "back to via_f32)";
  return std::string("oneDNN has no ") + dtype_name(ab) +
         " matmul on this CPU (it would fall back to via_f32)";
}

inline const auto kGemmLowpPaths =
    ::testing::Values(kernels::LowpGemmImpl::kViaF32, kernels::LowpGemmImpl::kOneDnnMatmul,
                      kernels::LowpGemmImpl::kPacked);

inline std::string gemm_lowp_path_name(
    const ::testing::TestParamInfo<kernels::LowpGemmImpl>& info) {
  return kernels::gemm_lowp_impl_name(info.param);
}

}  // namespace kiri::test

// In a TEST: the rest of the body runs with gemm_lowp forced to `impl`, or the
// test is skipped, with the reason, when this CPU has no such kernel for `ab`.
#define KIRI_USE_GEMM_LOWP(impl, ab)                                                       \
  ::kiri::test::ScopedGemmLowp kiri_gemm_lowp_scope_(impl);                                \
  if (const std::string why = ::kiri::test::gemm_lowp_unavailable(impl, ab); !why.empty()) \
  GTEST_SKIP() << why
