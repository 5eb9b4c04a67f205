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
  double gemm_step_s = 0;  // the step's GEMMs alone, median of a few replays
  // The fp32 FMA peak on spec.threads cores (kernels::peak_flops), or spec's.
  double peak_flops = 0;
  double gemm_flops = 0;  // one 1024^3 fp32 GEMM on spec.threads, FLOP/s
  double mfu = 0;         // model FLOPs/s over peak_flops (docs/metrics.md)
  double mfu_gemm = 0;    // model FLOPs/s over gemm_flops
  double loss_first = 0, loss_last = 0;
};

// Named configs: "tiny" (4 x 256, T 128, B 8) and "gpt2-124M" (12 x 768, T 64, B 4), GPT-2 vocab;
// Llamas "tiny-llama" (tiny's size: 4 x 256, GQA 4/2, SwiGLU 688, vocab 32000 untied, T 128,
// B 8) and "smollm-135M" (SmolLM-135M's shape, T 64, B 4).
BenchSpec bench_preset(const std::string& name);
BenchResult run_training_bench(const BenchSpec& spec);

// Inputs and targets (I32, the same shape) of uniformly random tokens below vocab_size,
// drawn from rng element by element: inputs[i], then targets[i].
void fill_random_tokens(Rng& rng, int64_t vocab_size, Tensor& inputs, Tensor& targets);

}  // namespace kiri::bench
