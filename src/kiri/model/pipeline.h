#pragma once
// The pipeline executor: runs one step's forwards and backwards of m
// micro-batches over this rank's model chunks, in the order of the
// schedule's table (parallel/pp/schedule.h), moving activations and their
// gradients between neighbouring stages with point-to-point messages.
//
// Model chunk g (of p * v, in model order) lives on pipeline rank g % p as
// its local chunk g / p. A forward of chunk g > 0 receives its input from
// rank (g - 1) % p; its output goes to rank (g + 1) % p unless it is the
// last chunk, which computes the loss. Backward runs the other way. Sends
// are non-blocking (the tables assume they never block the sender) and are
// waited for at the end of the step; receives block until the data arrives.
#include <vector>

#include "kiri/model/gpt.h"
#include "kiri/parallel/mesh.h"
#include "kiri/parallel/pp/schedule.h"

namespace kiri::model {

struct PipelineOptions {
  parallel::pp::ScheduleKind schedule = parallel::pp::ScheduleKind::k1F1B;
  int microbatches = 1;
  int virtual_stages = 1;
};

class Pipeline {
 public:
  // chunks: this rank's model chunks, local chunk order.
  Pipeline(std::vector<GPT<float>*> chunks, comm::Communicator& pp, const PipelineOptions& options);

  // tokens, targets: [m * B, T] I32, micro-batch i = rows [i*B, (i+1)*B).
  // Returns the sum of the token losses (on the rank holding the last
  // chunk; 0 elsewhere). Gradients accumulate into the chunks' parameters.
  double run(nn::Context& ctx, const Tensor& tokens, const Tensor& targets, double loss_weight);

  // Forward only (evaluation; ctx.training off): one micro-batch through the
  // chunks in model order. Returns the loss sum on the last chunk's rank.
  double forward_only(nn::Context& ctx, const Tensor& tokens, const Tensor& targets);

  const std::vector<parallel::pp::Action>& table() const { return table_; }
  int num_chunks() const { return stages_ * options_.virtual_stages; }

 private:
  Tensor receive(nn::Context& ctx, int from, int tag, int64_t rows, int64_t cols);
  int tag(int micro, int chunk, bool backward) const;

  std::vector<GPT<float>*> chunks_;
  comm::Communicator& pp_;
  PipelineOptions options_;
  int stages_, stage_;
  std::vector<parallel::pp::Action> table_;
};

}  // namespace kiri::model
