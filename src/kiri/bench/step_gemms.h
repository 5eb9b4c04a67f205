#pragma once
// The GEMMs of one training step, replayed alone: the denominator of kiri bench's "step over
// its GEMMs" (docs/performance.md), at the step's dtype, through the same GEMM front and path
// that the step's layers call.
#include <cstdint>
#include <vector>

#include "kiri/config/gpt_config.h"
#include "kiri/tensor/dtype.h"

namespace kiri::bench {

// One GEMM of the step: C[m,n] = op(A) op(B) + beta C, with A and B of the step's dtype.
struct StepGemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float beta = 0;  // 1 where the step accumulates: dinput, dweight and GPT-2's biased forward
  DType c_dtype = DType::kF32;  // a 16-bit step's weight gradients are 16-bit; the rest fp32
};

// The linear layers' and the LM head's GEMMs of one step of `batch` x `seq` tokens whose
// parameters are of `dtype` (nn/layers.cpp, parallel/tp/vocab_parallel.cpp): per linear its
// forward, dinput and dweight, layer by layer, then the head's three. For kF32 they are
// kernels::gemm<float>'s calls, for kBF16 and kF16 kernels::gemm_lowp's.
std::vector<StepGemm> step_linear_gemms(const kiri::GPTConfig& c, int64_t batch, int64_t seq,
                                        DType dtype);

// One step's GEMMs with their operands, allocated once, to replay alone on the calling
// thread's OpenMP threads: step_linear_gemms through kernels::gemm<float> or
// kernels::gemm_lowp (on the path that gemm_lowp takes for each shape when run() is called:
// choose it first, as the step does), and attention's per-head products (2 forward, 5
// backward) through gemm<float>, as the step's attention computes in fp32 at every dtype.
class StepGemmReplay {
 public:
  StepGemmReplay(const kiri::GPTConfig& c, int64_t batch, int64_t seq, DType dtype);
  double run();  // one replay of all of them: seconds

 private:
  void linear_gemms();
  void attention();

  kiri::GPTConfig c_;
  int64_t batch_, seq_;
  DType dtype_;
  std::vector<StepGemm> gemms_;
  std::vector<float> a_, b_, c32_;         // A, B and the fp32 C of every GEMM (fp32 step)
  std::vector<uint16_t> a16_, b16_, c16_;  // 16-bit step: A, B and the weight gradients' C
  std::vector<float> att_, q_, o_;         // attention: [P,T,T] scores, [B,T,3C], [B,T,C]
};

}  // namespace kiri::bench
