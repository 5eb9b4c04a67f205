#pragma once
// The training benchmark behind `kiri bench`: tokens/s and MFU of full
// training steps (forward, backward, AdamW) of a model on random tokens, and
// beside it the time that the same step's GEMMs alone take, measured in the
// same run (so the ratio says how much of a step is not matrix multiply).
#include <cstdint>
#include <string>

#include "kiri/base/rng.h"
#include "kiri/model/gpt.h"

namespace kiri::bench {

struct BenchSpec {
  std::string name;
  kiri::GPTConfig model;
  int64_t batch = 8;
  int64_t seq = 128;
  int threads = 1;
  int warmup_steps = 2;
  int steps = 5;
  double peak_flops = 0;  // MFU's denominator, FLOP/s (--peak-flops); 0 = measured
  // The step's parameters and gradients (model::ParallelOptions::dtype): kF32, or kBF16 and
  // kF16 for mixed precision (16-bit GEMM operands, fp32 master weights), as --dtypes runs.
  DType dtype = DType::kF32;
  // The step's settings: the weights' seed, the random tokens' seed (dp rank r draws from
  // data_seed + r) and AdamW's learning rate.
  uint64_t init_seed = 1234;
  uint64_t data_seed = 42;
  double lr = 3e-4;
};

struct BenchResult {
  BenchSpec spec;
  double step_s = 0;       // median over the timed steps
  double optimizer_s = 0;  // the step's optimizer passes (StepOutcome::optimizer_s), median
  double tokens_per_s = 0;
  // The step's GEMMs alone at spec.dtype (StepGemmReplay), replayed right after each step:
  // the median replay, and the median over the timed steps of step / its replay.
  double gemm_step_s = 0;
  double step_over_gemms = 0;
  std::string gemm_lowp;  // 16-bit: the path gemm_lowp took (its description), else ""
  // The peak of spec.dtype on spec.threads cores (kernels::peak_flops: fp32's FMA, or the
  // 16-bit dot product where it is faster), or spec's; and the instruction that reached it
  // (kernels::core_peak), "given" for spec's.
  double peak_flops = 0;
  std::string peak_instruction;
  double gemm_flops = 0;  // one 1024^3 fp32 GEMM on spec.threads, FLOP/s
  double mfu = 0;         // model FLOPs/s over peak_flops (docs/metrics.md)
  double mfu_gemm = 0;    // model FLOPs/s over gemm_flops
  // Memory-bound work on spec.threads: the memory bandwidth (kernels::measure_memory_bandwidth)
  // and AdamW's update over the model's parameter count, bytes/s (measure_memory_rates).
  double memory_bandwidth = 0;
  double adamw_bandwidth = 0;
  double loss_first = 0, loss_last = 0;
};

// Named configs: "tiny" (4 x 256, T 128, B 8) and "gpt2-124M" (12 x 768, T 64, B 4), GPT-2 vocab;
// Llamas "tiny-llama" (tiny's size: 4 x 256, GQA 4/2, SwiGLU 688, vocab 32000 untied, T 128,
// B 8) and "smollm-135M" (SmolLM-135M's shape, T 64, B 4).
BenchSpec bench_preset(const std::string& name);
// spec.warmup_steps + spec.steps steps at spec.dtype on one process, each followed by one
// replay of its GEMMs alone at that dtype (StepGemmReplay). A 16-bit run first chooses
// gemm_lowp's path on the step's shapes as kiri train does (train::choose_gemm_lowp_path;
// KIRI_GEMM_LOWP forces one) and leaves that choice installed.
BenchResult run_training_bench(const BenchSpec& spec);

// AdamW's effective bandwidth: the bytes its update must move over n parameters whose
// values and gradients are `dtype` (fp32: param, m, v read and written, the gradient read;
// 16-bit: the fp32 master instead of the param, and the 16-bit values written; zero_grad:
// the gradient written back as zeros, as a training step's update does) over the time of
// one kernels::adamw_update on `threads` OpenMP threads, the best of `repeats` after a
// warm-up. Bytes/s.
double measure_adamw_bandwidth(int64_t n, DType dtype, bool zero_grad, int threads,
                               int repeats = 5);
// The memory bandwidth (kernels::measure_memory_bandwidth over arrays of array_bytes, 0:
// the default) and AdamW's (measure_adamw_bandwidth over n parameters of `dtype`, zeroing
// the gradient as the step does) on `threads`, measured alternately `rounds` times, the
// best of each (3 passes a measurement): a busy spell of a shared machine slows both.
struct MemoryRates {
  double memory = 0, adamw = 0;  // bytes/s
};
MemoryRates measure_memory_rates(int64_t n, DType dtype, int threads, int64_t array_bytes = 0,
                                 int rounds = 2);
// The bytes adamw_update moves per element: 28 for fp32, bf16 and fp16, plus the
// gradient's size when it zeroes the gradient.
int64_t adamw_bytes_per_element(DType dtype, bool zero_grad);

// Inputs and targets (I32, the same shape) of uniformly random tokens below vocab_size,
// drawn from rng element by element: inputs[i], then targets[i].
void fill_random_tokens(Rng& rng, int64_t vocab_size, Tensor& inputs, Tensor& targets);

}  // namespace kiri::bench
