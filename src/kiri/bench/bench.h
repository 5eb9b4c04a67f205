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
  double step_s = 0;  // median over the timed steps
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

// Inputs and targets (I32, the same shape) of uniformly random tokens below vocab_size,
// drawn from rng element by element: inputs[i], then targets[i].
void fill_random_tokens(Rng& rng, int64_t vocab_size, Tensor& inputs, Tensor& targets);

}  // namespace kiri::bench
