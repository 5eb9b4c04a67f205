// The whole tiny training step on the checked device (tensor/device.h): every block that
// the model, the optimizer and the step allocate is poisoned and fenced, so a kernel that
// reads memory nobody wrote turns the loss into NaN and a write out of bounds is named.
// The seam is exercised on every machine, and the losses and norms equal the host's bit
// for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/comm/self.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/train/step.h"

namespace kiri::train {
namespace {

struct Trace {
  std::vector<double> loss, norm;
};

// Four steps of a 2-layer model on one batch of random tokens, every tensor from `device`.
Trace run_steps(Device device, Arch arch) {
  GPTConfig cfg;
  cfg.arch = arch;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 32;
  cfg.vocab_size = 61;  // odd: no kernel gets a multiple of its vector width for free
  cfg.block_size = 16;
  if (arch == Arch::kLlama) cfg.num_key_value_heads = 1, cfg.tie_word_embeddings = false;
  std::unique_ptr<comm::Communicator> self = comm::self_communicator();
  parallel::ParallelDims dims(*self, {1, 1, 1});
  Allocator allocator(device);
  Trace trace;
  {
    model::GPT<float> model(cfg);
    model::ParallelGPT pm(model, dims, {}, allocator);
    optim::AdamW opt(pm.optimizer_state_numel(), pm.optimizer_segments(), AdamWConfig{}, allocator,
                     pm.norm_groups());
    opt.initialize(1234);
    pm.synchronize_parameters();
    TrainingStep step(pm, opt);
    Tensor x = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
    Tensor y = Tensor::empty({2, 16}, DType::kI32, Category::kBuffers, allocator);
    EXPECT_EQ(x.device(), device);
    nn::Context ctx{allocator};
    ctx.poll = pm.poller();
    StepSettings settings;
    settings.lr = 1e-2;
    settings.loss_weight = 1.0 / double(x.numel());
    Rng rng(7);  // one batch of random tokens, learnt over the steps
    for (int64_t i = 0; i < x.numel(); ++i) {
      x.data<int32_t>()[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
      y.data<int32_t>()[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    }
    for (int s = 0; s < 4; ++s) {
      const StepOutcome out = step.run(ctx, x, y, settings);
      trace.loss.push_back(out.loss_sum * settings.loss_weight);
      trace.norm.push_back(out.grad_norm);
    }
    allocator.check_device();  // the live blocks' guards
  }
  allocator.check_device();  // and every freed block's
  EXPECT_EQ(allocator.stats().allocated, 0);
  return trace;
}

class CheckedDevice : public ::testing::TestWithParam<Arch> {};

TEST_P(CheckedDevice, TheTrainingStepRunsThereAndEqualsTheHostBitwise) {
  const Trace host = run_steps(Device::kHost, GetParam());
  const Trace checked = run_steps(Device::kChecked, GetParam());
  ASSERT_EQ(checked.loss.size(), 4u);
  for (size_t s = 0; s < host.loss.size(); ++s) {
    EXPECT_TRUE(std::isfinite(checked.loss[s]) && std::isfinite(checked.norm[s])) << s;
    EXPECT_EQ(checked.loss[s], host.loss[s]) << "step " << s;
    EXPECT_EQ(checked.norm[s], host.norm[s]) << "step " << s;
  }
  EXPECT_LT(checked.loss.back(), checked.loss.front());  // it trains
}

INSTANTIATE_TEST_SUITE_P(Archs, CheckedDevice, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& info) {
                           return std::string(info.param == Arch::kGpt2 ? "gpt2" : "llama");
                         });

}  // namespace
}  // namespace kiri::train
