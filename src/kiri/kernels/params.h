#pragma once
// The plain types that kernels' fronts (ops.h, peak.h) and every backend share: one
// definition, so that a backend folder (kernels/cpu, later another) takes the very types
// the callers pass, and the front forwards them without converting.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/tensor/dtype.h"

namespace kiri::kernels {

// How gemm_lowp computes (ops.h says what each means).
enum class LowpGemmImpl { kAuto, kOneDnnMatmul, kViaF32, kPacked };

// One shape gemm_lowp is timed on: op(A)[M,K] @ op(B)[K,N] (ops.h, measure_gemm_lowp_rates).
struct LowpGemmShape {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  std::string role;  // what the step computes with it, e.g. "lm_head dweight" (reports only)
  // C of A's dtype, accumulated into (beta 1), as a 16-bit step's weight gradient; else an fp32
  // C written (beta 0), the forward's form. The paths differ most in how they write C.
  bool c_lowp = false;
};

// The paths' measured rates on one shape, in FLOP/s (2MNK per GEMM). onednn is 0 where
// oneDNN has no kernel for the dtype on this CPU, packed 0 where kiri's packed kernel is not
// built (no AVX-512) or does not take the shape.
struct LowpGemmRate {
  LowpGemmShape shape;
  double via_f32 = 0, onednn = 0;
  // The share of its cores the measuring threads were on while timing (each OpenMP thread's
  // CPU time over the wall time, averaged): below 0.9 another process or thread held the
  // cores, and such a rate is measured again when the cores are free (gemm_lowp_choice.cpp).
  // 0: not known (a cache line written before this was kept).
  double cpu_share = 1;
  double packed = 0;
  // The fastest path (kViaF32 on a tie, then kPacked; a path without a kernel rates 0).
  LowpGemmImpl faster() const {
    if (onednn > via_f32 && onednn > packed) return LowpGemmImpl::kOneDnnMatmul;
    return packed > via_f32 ? LowpGemmImpl::kPacked : LowpGemmImpl::kViaF32;
  }
  double fastest() const { return std::max(via_f32, std::max(onednn, packed)); }
};

// kAuto's table for one 16-bit dtype: the shapes' rates at `threads` OpenMP threads.
struct LowpGemmRates {
  DType ab = DType::kBF16;
  int threads = 0;
  std::vector<LowpGemmRate> shapes;
  int measured = 0;        // how many of the shapes were timed now (the rest came from the cache)
  std::string cache_file;  // where the rates are kept ("" when not kept)
  std::string cache_note;  // why they could not be kept there ("" when they were)
};

// One gemm_lowp call as record_gemm_lowp_calls (ops.h) keeps it: what the caller asked for.
struct LowpGemmCall {
  DType ab = DType::kBF16;  // A's and B's dtype
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float beta = 0;
  DType c_dtype = DType::kF32;
};

// Rotary embedding's parameters (ops.h, rope_inv_freq).
struct RopeParams {
  double theta = 10000.0;  // rope_theta
  // Llama 3's rope_scaling (rope_type "llama3"): long wavelengths slowed by
  // `factor`, short ones kept, the band between interpolated.
  bool llama3 = false;
  double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

// AdamW's hyperparameters for one update (ops.h, adamw_update).
struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradients are multiplied by this first (clipping, loss scale)
  // Set each gradient element to 0 once read: the next step's zeroing, fused into the
  // update's pass (the line is in cache: one write-back instead of a pass that reads and
  // writes the whole gradient).
  bool zero_grad = false;
};

// A core's measured peak (peak.h).
struct CorePeak {
  double flops = 0;         // FLOP/s of one core (an FMA counts 2)
  std::string instruction;  // what reached it, e.g. "avx512 vfmadd231ps"
};

}  // namespace kiri::kernels
