#pragma once
// Internal to the CPU kernels: the two implementations behind gemm_lowp.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiri/kernels/params.h"
#include "kiri/tensor/dtype.h"

namespace kiri::kernels::cpu::detail {

// gemm_lowp's arguments, already checked (M, N, K > 0).
struct LowpGemmArgs {
  DType ab;
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const void* A;  // [M,K] ([K,M] if trans_a), leading dimension lda, dtype ab
  int64_t lda;
  const void* B;  // [K,N] ([N,K] if trans_b), leading dimension ldb, dtype ab
  int64_t ldb;
  float beta;
  void* C;  // [M,N], leading dimension ldc, dtype c_dtype
  DType c_dtype;
  int64_t ldc;
};

// A and B widened to fp32 in panels, then gemm<float> (gemm_lowp.cpp).
void gemm_lowp_via_f32(const LowpGemmArgs& g);
// A and B widened as they are packed for kiri's own fp32 micro-kernel (gemm_packed.cpp). False
// when it does not take the GEMM (nothing was written): no AVX-512 in this build, neither
// operand small enough to pack whole with a 16-bit C, or a 16-bit C with beta other than 0, 1.
bool gemm_lowp_packed(const LowpGemmArgs& g);
bool gemm_lowp_packed_supported();
// Whether gemm_lowp_packed would take g (without computing it).
bool gemm_lowp_packed_takes(const LowpGemmArgs& g);
// kAuto's path for one GEMM: the fastest path of its shape class in the measured table
// (gemm_lowp_choice.cpp); kViaF32 where oneDNN has no kernel for ab.
LowpGemmImpl auto_path(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K);
// A cached oneDNN matmul primitive (gemm_lowp_onednn.cpp). False when oneDNN
// has no implementation for these dtypes on this CPU (nothing was written).
bool gemm_lowp_onednn(const LowpGemmArgs& g);
// oneDNN's name for the matmul kernel it picks for an fp32-accumulating
// 256x256x256 product of `ab` values into fp32 (e.g. "brg:avx512_core_amx_bf16"), or
// "" when it has none on this CPU. Computed once per dtype.
const std::string& onednn_lowp_kernel(DType ab);
// The auto path's timing: each path's best call, the paths' calls alternating, a path over
// 1.5x the fastest's time not called again (gemm_lowp_choice.cpp).
std::vector<double> best_seconds_interleaved(const std::vector<std::function<void()>>& paths);
// The share of their runnable time that the process's OpenMP threads spent on a core while f
// ran: time on a core over that plus time queued for one (the scheduler's own counts,
// /proc/thread-self/schedstat); 1 where the kernel does not keep them. cpu_share_now: the
// best of three such shares over 20 ms of arithmetic on every thread.
double cpu_share_while(const std::function<void()>& f);
double cpu_share_now();
// Below this share, other work held the cores while a rate was timed.
inline constexpr double kFreeCpuShare = 0.9;
// Whether a kept rate timed at `share` is timed again: it was timed beside other work (or its
// share is not known, 0) and the cores are free now.
inline bool measure_again(double share, bool free_now) {
  return share < kFreeCpuShare && free_now;
}

}  // namespace kiri::kernels::cpu::detail
