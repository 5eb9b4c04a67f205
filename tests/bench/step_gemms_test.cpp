// bench::step_linear_gemms, the list kiri bench replays as "the step's GEMMs", against the
// 16-bit GEMMs that one training step really calls (kernels::record_gemm_lowp_calls), for a
// GPT-2 and a Llama with an untied and a tied head, in bf16 and fp16.
#include "kiri/bench/step_gemms.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/bench/bench.h"
#include "kiri/comm/self.h"
#include "kiri/kernels/ops.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/step.h"

namespace kiri::bench {
namespace {

// What identifies a call: transposes, sizes, beta and C's dtype.
using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, float, DType>;

std::vector<Key> sorted(std::vector<Key> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::string str(const std::vector<Key>& v) {
  std::ostringstream o;
  for (const Key& k : v)
    o << (std::get<0>(k) ? "T" : "N") << (std::get<1>(k) ? "T" : "N") << " " << std::get<2>(k)
      << "x" << std::get<3>(k) << "x" << std::get<4>(k) << " beta " << std::get<5>(k) << " C "
      << dtype_name(std::get<6>(k)) << "\n";
  return o.str();
}

// The gemm_lowp calls of one training step (forward, backward, AdamW) of `c` with
// parameters of dtype `dt` on one process, B 2 x T 16 random tokens.
std::vector<kernels::LowpGemmCall> record_one_step(const kiri::GPTConfig& c, DType dt) {
  std::unique_ptr<comm::Communicator> self = comm::self_communicator();
  parallel::ParallelDims dims(*self, {1, 1, 1});
  Allocator allocator;
  model::GPT<float> model(c);
  model::ParallelOptions options;
  options.dtype = dt;
  model::ParallelGPT pm(model, dims, options, allocator);
  optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), kiri::AdamWConfig{},
                   allocator, pm.norm_groups());
  opt.initialize(7);
  pm.synchronize_parameters();
  train::TrainingStep step(pm, opt);
  Tensor x = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
  Tensor y = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
  Rng rng(3);
  fill_random_tokens(rng, c.vocab_size, x, y);
  nn::Context ctx{allocator};
  ctx.poll = pm.poller();
  train::StepSettings settings;
  settings.loss_weight = 1.0 / double(x.numel());
  std::vector<kernels::LowpGemmCall> calls;
  kernels::record_gemm_lowp_calls(&calls);
  step.run(ctx, x, y, settings);
  kernels::record_gemm_lowp_calls(nullptr);
  return calls;
}

kiri::GPTConfig small_llama(bool tied) {
  kiri::GPTConfig c{2, 4, 32, 96, 32};
  c.arch = kiri::Arch::kLlama;
  c.num_key_value_heads = 2;
  c.intermediate_size = 48;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(StepGemms, TheListIsTheSixteenBitGemmsThatAStepCalls) {
  const std::vector<std::pair<std::string, kiri::GPTConfig>> models = {
      {"gpt2", kiri::GPTConfig{2, 2, 32, 96, 32}},
      {"llama untied", small_llama(false)},
      {"llama tied", small_llama(true)}};
  for (const auto& [name, c] : models)
    for (DType dt : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(name + " " + dtype_name(dt));
      std::vector<Key> called, listed;
      for (const kernels::LowpGemmCall& k : record_one_step(c, dt)) {
        EXPECT_EQ(k.ab, dt);
        called.emplace_back(k.trans_a, k.trans_b, k.M, k.N, k.K, k.beta, k.c_dtype);
      }
      for (const StepGemm& s : step_linear_gemms(c, 2, 16, dt))
        listed.emplace_back(s.trans_a, s.trans_b, s.m, s.n, s.k, s.beta, s.c_dtype);
      // Per layer: 4 linears (GPT-2) or 7 (Llama) of 3 GEMMs each; the head's 3.
      EXPECT_EQ(listed.size(), size_t(c.n_layer) * (c.llama() ? 21 : 12) + 3);
      EXPECT_EQ(sorted(called), sorted(listed)) << "called:\n"
                                                << str(sorted(called)) << "listed:\n"
                                                << str(sorted(listed));
    }
}

// The fp32 list is the same GEMMs with every C in fp32 (the weight gradients are fp32).
TEST(StepGemms, TheFp32ListDiffersOnlyInTheWeightGradientsDtype) {
  const kiri::GPTConfig c{2, 2, 32, 96, 32};
  const std::vector<StepGemm> f = step_linear_gemms(c, 2, 16, DType::kF32);
  const std::vector<StepGemm> h = step_linear_gemms(c, 2, 16, DType::kBF16);
  ASSERT_EQ(f.size(), h.size());
  int bf16_c = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(std::tie(f[i].trans_a, f[i].trans_b, f[i].m, f[i].n, f[i].k, f[i].beta),
              std::tie(h[i].trans_a, h[i].trans_b, h[i].m, h[i].n, h[i].k, h[i].beta));
    EXPECT_EQ(f[i].c_dtype, DType::kF32);
    bf16_c += h[i].c_dtype == DType::kBF16;
  }
  EXPECT_EQ(bf16_c, c.n_layer * 4 + 1);  // one dweight per linear, and the head's
  EXPECT_THROW(step_linear_gemms(c, 2, 16, DType::kI32), Error);
}

}  // namespace
}  // namespace kiri::bench
