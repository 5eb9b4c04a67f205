#pragma once
// The plain types that kernels' fronts (ops.h, peak.h) and every backend share: one
// definition, so that a backend folder (kernels/cpu, later another) takes the very types
// the callers pass, and the front forwards them without converting.
#include <cstdint>
#include <string>

namespace kiri::kernels {

// How gemm_lowp computes (ops.h says what each means).
enum class LowpGemmImpl { kAuto, kOneDnnMatmul, kViaF32 };

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
};

// A core's measured peak (peak.h).
struct CorePeak {
  double flops = 0;         // FLOP/s of one core (an FMA counts 2)
  std::string instruction;  // what reached it, e.g. "avx512 vfmadd231ps"
};

}  // namespace kiri::kernels
