#include "offload_train/offload_bodies.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "kiri/train/offload_io.h"
#include "train_test_util.h"

namespace kiri::train {

RunConfig offload_config(comm::Communicator& world, const OffloadCase& k, bool offload,
                         const std::string& path) {
  RunConfig c = equivalence_config(2, 2, 30, 2);
  if (k.arch == kiri::Arch::kLlama) make_llama(c, 24, 4, 2, 64);
  c.train.grad_accum = k.grad_accum;
  c.train.dtype = k.dtype;
  c.parallel.tp = k.tp;
  c.parallel.pp = k.pp;
  c.parallel.dp = world.size() / (k.tp * k.pp);
  c.parallel.zero_stage = k.stage;
  if (k.pp > 1) c.parallel.microbatches = 2;
  if (offload) {
    c.offload.optimizer = kiri::OffloadTier::kNvme;
    if (k.parameters) c.offload.parameters = kiri::OffloadTier::kNvme;
    c.offload.gradients = k.gradients;
    c.offload.path = path;
    c.offload.block_size = "4KiB";
    c.offload.buffer_mb = 0.0625;
    c.offload.buffer_count = k.buffer_count;
  }
  return c;
}

namespace {
// Every state of every segment of this rank (fp32 weights, m, v), in segment order.
std::vector<float> states_of(Trainer& t) {
  optim::AdamW& o = t.optimizer();
  std::vector<float> out;
  Allocator alloc;
  for (size_t i = 0; i < o.segments().size(); ++i) {
    const auto& s = o.segments()[i];
    for (int k = 0; k < 3; ++k) {
      Tensor x = Tensor::empty({s.numel()}, DType::kF32, Category::kOther, alloc);
      if (k == 0)
        o.read_weights(i, 0, x);
      else
        o.read_state(k == 1 ? optim::State::kExpAvg : optim::State::kExpAvgSq, s.state_offset, x);
      out.insert(out.end(), x.data<float>(), x.data<float>() + x.numel());
    }
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

void offload_equals_memory(comm::Communicator& world, OffloadCase k) {
  omp_set_num_threads(1);  // ranks share the cores
  const std::string root = shared_temp_dir(world, "offload");
  {
    Trainer ref(offload_config(world, k, false, root), world);
    Trainer off(offload_config(world, k, true, root), world);
    ASSERT_TRUE(off.optimizer().offloaded());
    ASSERT_FALSE(ref.optimizer().offloaded());
    for (int s = 0; s < 10; ++s) {
      const StepMetrics a = ref.train_step(), b = off.train_step();
      EXPECT_EQ(a.loss, b.loss) << "step " << s + 1 << " rank " << world.rank();
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << s + 1 << " rank " << world.rank();
      // Offloaded, the update runs into the next step's forward (overlap across steps).
      EXPECT_TRUE(off.update_pending()) << "step " << s + 1;
      EXPECT_FALSE(ref.update_pending());
      if (s > 0) continue;
      // RAM after the first step: the run in memory's, with the optimizer states on NVMe
      // and the staging buffers added.
      const MemoryStats ma = a.mem, mb = b.mem;
      EXPECT_EQ(ma.of(Category::kActivations), mb.of(Category::kActivations))
          << "rank " << world.rank();
      // Gradient offload: the gradient shards leave RAM for the NVMe tier, byte for byte.
      const Category grads = Category::kGradients;
      const bool grads_off = offload_gradients(offload_config(world, k, true, root).offload);
      EXPECT_EQ(grads_off, k.gradients == kiri::OffloadTier::kNvme ||
                               (k.gradients == kiri::OffloadTier::kAuto && k.parameters));
      EXPECT_EQ(mb.of(grads), grads_off ? 0 : ma.of(grads)) << "rank " << world.rank();
      EXPECT_EQ(mb.nvme_of(grads), grads_off ? ma.of(grads) : 0) << "rank " << world.rank();
      EXPECT_EQ(mb.of(Category::kOptimizerStates), 0) << "rank " << world.rank();
      EXPECT_EQ(mb.nvme_of(Category::kOptimizerStates), ma.of(Category::kOptimizerStates))
          << "rank " << world.rank();
      // Parameter offload: the parameter shards leave RAM for the NVMe tier, byte for byte.
      const Category params = Category::kParameters;
      EXPECT_EQ(mb.of(params), k.parameters ? 0 : ma.of(params)) << "rank " << world.rank();
      EXPECT_EQ(mb.nvme_of(params), k.parameters ? ma.of(params) : 0) << "rank " << world.rank();
      EXPECT_EQ(ma.nvme_total(), 0);
      const optim::AdamW& o = off.optimizer();
      const int states = o.has_master() ? 3 : 2;
      EXPECT_EQ(mb.nvme_total(), states * 4 * o.state_numel() + (k.parameters ? ma.of(params) : 0) +
                                     (grads_off ? ma.of(grads) : 0));
    }
    EXPECT_TRUE(bitwise_equal(states_of(ref), states_of(off))) << "rank " << world.rank();
  }  // every rank's swap space gone: its folder is empty
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(root);
}

}  // namespace kiri::train
