#pragma once
// parallelize_gpt(): the one place where the cuts are applied to a GPT, in a
// fixed order. Today: data parallelism over the mesh's dp group. Tensor and
// pipeline parallelism, ZeRO sharding and activation checkpointing join
// here, each in its place in that order.
#include <memory>

#include "kiri/model/gpt.h"
#include "kiri/parallel/dp/ddp.h"
#include "kiri/parallel/mesh.h"

namespace kiri::model {

struct ParallelOptions {
  parallel::DdpOptions ddp;
};

// The model with its cuts applied: the training loop talks to this.
class ParallelGPT {
 public:
  ParallelGPT(GPT<float>& model, nn::ParameterStore& store, parallel::Mesh& mesh,
              const ParallelOptions& options, Allocator& allocator);

  // Makes every replica start from rank 0's parameters.
  void synchronize_parameters();
  // Before each micro-batch's forward: only the last one reduces gradients.
  void begin_micro_batch(bool last);
  // After each micro-batch's backward. After the last one every rank holds
  // the gradient of the global batch (finalize_grads, once per step).
  void end_micro_batch();

  // What backward should call between operations (nn::Context::poll) so the
  // outstanding reductions progress; empty when there are none.
  std::function<void()> poller();

  GPT<float>& model() { return model_; }
  parallel::DistributedDataParallel* ddp() { return ddp_.get(); }

 private:
  GPT<float>& model_;
  parallel::Mesh& mesh_;
  bool last_ = true;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
};

}  // namespace kiri::model
