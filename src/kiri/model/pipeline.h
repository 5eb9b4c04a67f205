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
//
// The executor runs against PipelineStage, a chunk's forward and backward
// of one micro-batch; GptStage adapts a GPT part. With a Tracer on the pp
// communicator (Communicator::set_tracer), every forward and backward is a
// compute-lane span ("forward m3 c0", category "pipeline"); the receives
// and sends are comm-lane spans of the communicator. Independently of
// tracing, each run() measures this rank's bubble fraction (stats()).
#include <chrono>
#include <memory>
#include <vector>

#include "kiri/model/gpt.h"
#include "kiri/parallel/dims.h"
#include "kiri/parallel/pp/schedule.h"

namespace kiri::model {

struct PipelineOptions {
  kiri::PipelineSchedule schedule = kiri::PipelineSchedule::k1F1B;
  int microbatches = 1;
  int virtual_stages = 1;
};

// One model chunk as the executor sees it. Activations between chunks are
// [rows(B*T), width()] F32.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // The forward of micro-batch ctx.micro_batch: tokens, targets [B, T] I32;
  // input = the previous chunk's output (undefined for the first chunk).
  // The last chunk adds the sum of its token losses to *loss_sum and
  // returns an undefined tensor; the others return their output.
  virtual Tensor forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                         const Tensor& input, double loss_weight, double* loss_sum) = 0;
  // Its backward: dout = the gradient of the output (undefined for the last
  // chunk); returns the gradient of the input (undefined for the first).
  virtual Tensor backward(nn::Context& ctx, const Tensor& dout) = 0;
  // The columns of the activations it receives and sends.
  virtual int64_t width() const = 0;
  // ... and their rows for a micro-batch of `tokens` (fewer under sequence parallelism).
  virtual int64_t rows(int64_t tokens) const { return tokens; }
};

// A GPT part (GPT::forward_part / backward_part) as a stage.
class GptStage final : public PipelineStage {
 public:
  explicit GptStage(GPT<float>& gpt) : gpt_(gpt) {}
  Tensor forward(nn::Context& ctx, const Tensor& tokens, const Tensor& targets, const Tensor& input,
                 double loss_weight, double* loss_sum) override {
    return gpt_.forward_part(ctx, tokens, targets, input, loss_weight, loss_sum);
  }
  Tensor backward(nn::Context& ctx, const Tensor& dout) override {
    return gpt_.backward_part(ctx, dout);
  }
  int64_t width() const override { return gpt_.config().n_embd; }
  int64_t rows(int64_t tokens) const override { return gpt_.local_rows(tokens); }

 private:
  GPT<float>& gpt_;
};

// What run() measured on this rank. window_s: from the start of run() until
// its sends completed; compute_s: the time inside the stages' forward and
// backward. Everything else (waiting in receives, for sends, for nothing)
// is not computing. Accumulated over runs; subtract two snapshots for a
// step of several runs.
struct PipelineStats {
  int64_t runs = 0;
  double window_s = 0, compute_s = 0;
  // 1 - compute / window: the share of the window this rank was not
  // computing; 0 before any run.
  double bubble() const { return window_s > 0 ? 1.0 - compute_s / window_s : 0.0; }
  PipelineStats operator-(const PipelineStats& o) const {
    return {runs - o.runs, window_s - o.window_s, compute_s - o.compute_s};
  }
};

class Pipeline {
 public:
  // stages: this rank's chunks, local chunk order (not owned).
  Pipeline(std::vector<PipelineStage*> stages, comm::Communicator& pp,
           const PipelineOptions& options);
  // chunks: this rank's model chunks, local chunk order (adapted by GptStage).
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
  // Totals over every run() so far (forward_only is not counted).
  const PipelineStats& stats() const { return stats_; }
  // The last run()'s alone.
  const PipelineStats& last_run() const { return last_run_; }

 private:
  using Clock = std::chrono::steady_clock;
  void init();
  Tensor receive(nn::Context& ctx, int from, int tag, int64_t rows, int64_t cols);
  int tag(int micro, int chunk, bool backward) const;

  std::vector<std::unique_ptr<PipelineStage>> owned_;  // the GptStage adapters
  std::vector<PipelineStage*> chunks_;
  comm::Communicator& pp_;
  PipelineOptions options_;
  int stages_, stage_;
  std::vector<parallel::pp::Action> table_;
  PipelineStats stats_, last_run_;
};

}  // namespace kiri::model
