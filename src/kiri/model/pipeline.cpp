#include "kiri/model/pipeline.h"

namespace kiri::model {

namespace pp = parallel::pp;

Pipeline::Pipeline(std::vector<GPT<float>*> chunks, comm::Communicator& pp_group,
                   const PipelineOptions& options)
    : chunks_(std::move(chunks)),
      pp_(pp_group),
      options_(options),
      stages_(pp_group.size()),
      stage_(pp_group.rank()) {
  KIRI_CHECK(static_cast<int>(chunks_.size()) == options.virtual_stages, "pipeline rank ", stage_,
             " holds ", chunks_.size(), " chunks, the schedule needs ", options.virtual_stages);
  table_ = pp::make_schedule(options.schedule, stages_, options.microbatches,
                             options.virtual_stages)[stage_];
}

int Pipeline::tag(int micro, int chunk, bool backward) const {
  // Unique per (micro-batch, receiving chunk, direction) within a step.
  return (micro * num_chunks() + chunk) * 2 + (backward ? 1 : 0);
}

Tensor Pipeline::receive(nn::Context& ctx, int from, int t, int64_t rows, int64_t cols) {
  Tensor x = nn::activation(ctx, {rows, cols}, DType::kF32);  // [B*T, C]
  pp_.recv(x, from, t);
  return x;
}

double Pipeline::run(nn::Context& ctx, const Tensor& tokens, const Tensor& targets,
                     double loss_weight) {
  const int m = options_.microbatches, g_last = num_chunks() - 1;
  KIRI_CHECK(tokens.rank() == 2 && tokens.dim(0) % m == 0, "the pipeline splits ",
             tokens.shape().str(), " into ", m, " micro-batches");
  const int64_t b = tokens.dim(0) / m, t = tokens.dim(1), c = chunks_[0]->config().n_embd;
  double loss = 0;
  std::vector<std::pair<comm::WorkHandle, Tensor>> sends;
  const int saved_micro = ctx.micro_batch;
  for (const pp::Action& a : table_) {
    const int g = a.chunk * stages_ + stage_;  // the model chunk
    GPT<float>& chunk = *chunks_[a.chunk];
    ctx.micro_batch = a.micro;
    const Tensor x = tokens.flat_range(a.micro * b * t, b * t).view({b, t});
    const Tensor y = targets.flat_range(a.micro * b * t, b * t).view({b, t});
    if (a.op == pp::Action::Op::kForward) {
      Tensor input;
      if (g > 0) input = receive(ctx, (g - 1) % stages_, tag(a.micro, g, false), b * t, c);
      Tensor out = chunk.forward_part(ctx, x, y, input, loss_weight, &loss);
      if (g < g_last) {
        const int to = (g + 1) % stages_;
        sends.emplace_back(pp_.send_async(out, to, tag(a.micro, g + 1, false)), out);
      }
    } else {
      Tensor dout;
      if (g < g_last) dout = receive(ctx, (g + 1) % stages_, tag(a.micro, g, true), b * t, c);
      Tensor din = chunk.backward_part(ctx, dout);
      if (g > 0) {
        const int to = (g - 1) % stages_;
        sends.emplace_back(pp_.send_async(din, to, tag(a.micro, g - 1, true)), din);
      }
    }
    ctx.progress();
  }
  for (auto& [work, tensor] : sends) work->wait();
  ctx.micro_batch = saved_micro;
  return loss;
}

double Pipeline::forward_only(nn::Context& ctx, const Tensor& tokens, const Tensor& targets) {
  const int64_t n = tokens.numel(), c = chunks_[0]->config().n_embd;
  const int g_last = num_chunks() - 1;
  double loss = 0;
  std::vector<std::pair<comm::WorkHandle, Tensor>> sends;
  for (int g = stage_; g <= g_last; g += stages_) {
    Tensor input;
    if (g > 0) input = receive(ctx, (g - 1) % stages_, tag(0, g, false), n, c);
    Tensor out = chunks_[g / stages_]->forward_part(ctx, tokens, targets, input, 0.0, &loss);
    if (g < g_last)
      sends.emplace_back(pp_.send_async(out, (g + 1) % stages_, tag(0, g + 1, false)), out);
  }
  for (auto& [work, tensor] : sends) work->wait();
  return loss;
}

}  // namespace kiri::model
