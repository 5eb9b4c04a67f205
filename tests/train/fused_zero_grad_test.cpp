// The gradients' zeroing fused into the optimizer's update (StepOptions::fuse_zero_grad,
// AdamW::set_zero_grads): steps with it are bitwise the steps with a zeroing pass of their
// own (losses, norms, weights, states), in fp32 and bf16, with gradient accumulation and
// across a skipped (non-finite) step, whose gradients the next step still zeroes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/comm/self.h"
#include "kiri/kernels/ops.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/step.h"

namespace kiri::train {
namespace {

struct StepsRun {
  std::vector<double> loss, norm;
  std::vector<bool> grads_zero_after;    // every gradient 0 after the step
  std::vector<std::vector<char>> bytes;  // values, master (16-bit), m, v after the last step
};

std::vector<char> bytes_of(const Tensor& t) {
  const char* p = static_cast<const char*>(t.raw());
  return std::vector<char>(p, p + t.nbytes());
}

// Five steps of a 2-layer model on one batch of random tokens: step 1 accumulates two
// batches, step 2's loss is infinite (skipped).
StepsRun run_steps(DType dtype, bool fuse) {
  GPTConfig cfg;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.vocab_size = 61;
  cfg.block_size = 16;
  std::unique_ptr<comm::Communicator> self = comm::self_communicator();
  parallel::ParallelDims dims(*self, {1, 1, 1});
  Allocator allocator;
  model::GPT<float> model(cfg);
  model::ParallelOptions po;
  po.dtype = dtype;
  model::ParallelGPT pm(model, dims, po, allocator);
  optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), AdamWConfig{}, allocator,
                   pm.norm_groups());
  opt.initialize(1234);
  pm.synchronize_parameters();
  StepOptions so;
  so.fuse_zero_grad = fuse;
  TrainingStep step(pm, opt, so);
  Tensor x = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
  Tensor y = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
  Rng rng(7);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
  }
  nn::Context ctx{allocator};
  StepsRun run;
  for (int s = 0; s < 5; ++s) {
    StepSettings settings;
    settings.lr = 1e-2;
    settings.loss_weight = 1.0 / double(x.numel());
    settings.accumulation = s == 1 ? 2 : 1;
    settings.loss_factor = s == 2 ? std::numeric_limits<double>::infinity() : 1.0;
    const StepOutcome out = step.run(ctx, x, y, settings);
    EXPECT_EQ(out.skipped, s == 2) << "step " << s;
    EXPECT_GT(out.optimizer_s, 0.0) << "step " << s;
    run.loss.push_back(out.loss_sum * settings.loss_weight);
    run.norm.push_back(out.grad_norm);
    bool zero = true;
    for (const nn::ParameterSegment& seg : opt.segments())
      zero = zero && kernels::sum_of_squares(seg.grad) == 0.0;
    run.grads_zero_after.push_back(zero);
  }
  for (const nn::ParameterSegment& seg : opt.segments()) run.bytes.push_back(bytes_of(seg.value));
  if (opt.has_master()) run.bytes.push_back(bytes_of(opt.master()));
  run.bytes.push_back(bytes_of(opt.exp_avg()));
  run.bytes.push_back(bytes_of(opt.exp_avg_sq()));
  return run;
}

TEST(FusedZeroGrad, StepsEqualAZeroingPassBitwise) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string d = dtype_name(dtype);
    const StepsRun apart = run_steps(dtype, false), fused = run_steps(dtype, true);
    ASSERT_EQ(apart.loss.size(), 5u);
    for (size_t s = 0; s < apart.loss.size(); ++s) {
      EXPECT_EQ(fused.loss[s], apart.loss[s]) << d << " step " << s;
      if (s != 2) {  // the skipped step's norm is NaN or inf: compared below
        EXPECT_TRUE(std::isfinite(apart.norm[s])) << d << " step " << s;
        EXPECT_EQ(fused.norm[s], apart.norm[s]) << d << " step " << s;
      }
      // The fused update leaves the gradients zeroed; a skipped step (no update) and
      // the separate pass (zeroing before the next backward) leave them as they were.
      EXPECT_EQ(fused.grads_zero_after[s], s != 2) << d << " step " << s;
      EXPECT_FALSE(apart.grads_zero_after[s]) << d << " step " << s;
    }
    EXPECT_FALSE(std::isfinite(fused.norm[2]) || std::isfinite(apart.norm[2])) << d;
    ASSERT_EQ(fused.bytes.size(), apart.bytes.size()) << d;
    for (size_t i = 0; i < apart.bytes.size(); ++i)
      EXPECT_TRUE(fused.bytes[i] == apart.bytes[i]) << d << " tensor " << i;
    EXPECT_LT(apart.loss.back(), apart.loss.front()) << d;  // it trains
  }
}

}  // namespace
}  // namespace kiri::train
