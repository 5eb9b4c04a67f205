#include "kiri/model/pipeline.h"

#include <string>

#include "kiri/base/trace.h"

namespace kiri::model {

namespace pp = parallel::pp;

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// "forward m3 c0": built only when tracing.
std::string span_name(Tracer* tracer, const char* op, int micro, int chunk) {
  if (!tracer) return {};
  return std::string(op) + " m" + std::to_string(micro) + " c" + std::to_string(chunk);
}
}  // namespace

Pipeline::Pipeline(std::vector<PipelineStage*> stages, comm::Communicator& pp_group,
                   const PipelineOptions& options)
    : chunks_(std::move(stages)),
      pp_(pp_group),
      options_(options),
      stages_(pp_group.size()),
      stage_(pp_group.rank()) {
  init();
}

Pipeline::Pipeline(std::vector<GPT<float>*> chunks, comm::Communicator& pp_group,
                   const PipelineOptions& options)
    : pp_(pp_group), options_(options), stages_(pp_group.size()), stage_(pp_group.rank()) {
  for (GPT<float>* c : chunks) {
    owned_.push_back(std::make_unique<GptStage>(*c));
    chunks_.push_back(owned_.back().get());
  }
  init();
}

void Pipeline::init() {
  KIRI_CHECK(static_cast<int>(chunks_.size()) == options_.virtual_stages, "pipeline rank ", stage_,
             " holds ", chunks_.size(), " chunks, the schedule needs ", options_.virtual_stages);
  table_ = pp::make_schedule(options_.schedule, stages_, options_.microbatches,
                             options_.virtual_stages)[stage_];
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
  const int64_t b = tokens.dim(0) / m, t = tokens.dim(1), c = chunks_[0]->width();
  Tracer* const tracer = pp_.tracer();
  const Clock::time_point start = Clock::now();
  double compute_s = 0;
  double loss = 0;
  std::vector<std::pair<comm::WorkHandle, Tensor>> sends;
  const int saved_micro = ctx.micro_batch;
  for (const pp::Action& a : table_) {
    const int g = a.chunk * stages_ + stage_;  // the model chunk
    PipelineStage& chunk = *chunks_[a.chunk];
    ctx.micro_batch = a.micro;
    const Tensor x = tokens.flat_range(a.micro * b * t, b * t).view({b, t});
    const Tensor y = targets.flat_range(a.micro * b * t, b * t).view({b, t});
    if (a.op == pp::Action::Op::kForward) {
      Tensor input;
      if (g > 0)
        input = receive(ctx, (g - 1) % stages_, tag(a.micro, g, false), chunk.rows(b * t), c);
      Tensor out;
      {
        Tracer::Span span(tracer, span_name(tracer, "forward", a.micro, a.chunk), "pipeline");
        const Clock::time_point t0 = Clock::now();
        out = chunk.forward(ctx, x, y, input, loss_weight, &loss);
        compute_s += seconds_between(t0, Clock::now());
      }
      if (g < g_last) {
        const int to = (g + 1) % stages_;
        sends.emplace_back(pp_.send_async(out, to, tag(a.micro, g + 1, false)), out);
      }
    } else {
      Tensor dout;
      if (g < g_last)
        dout = receive(ctx, (g + 1) % stages_, tag(a.micro, g, true), chunk.rows(b * t), c);
      Tensor din;
      {
        Tracer::Span span(tracer, span_name(tracer, "backward", a.micro, a.chunk), "pipeline");
        const Clock::time_point t0 = Clock::now();
        din = chunk.backward(ctx, dout);
        compute_s += seconds_between(t0, Clock::now());
      }
      if (g > 0) {
        const int to = (g - 1) % stages_;
        sends.emplace_back(pp_.send_async(din, to, tag(a.micro, g - 1, true)), din);
      }
    }
    ctx.progress();
  }
  for (auto& [work, tensor] : sends) work->wait();
  ctx.micro_batch = saved_micro;
  last_run_ = {1, seconds_between(start, Clock::now()), compute_s};
  stats_.runs += 1;
  stats_.window_s += last_run_.window_s;
  stats_.compute_s += last_run_.compute_s;
  return loss;
}

double Pipeline::forward_only(nn::Context& ctx, const Tensor& tokens, const Tensor& targets) {
  const int64_t n = tokens.numel(), c = chunks_[0]->width();
  const int g_last = num_chunks() - 1;
  Tracer* const tracer = pp_.tracer();
  double loss = 0;
  std::vector<std::pair<comm::WorkHandle, Tensor>> sends;
  for (int g = stage_; g <= g_last; g += stages_) {
    Tensor input;
    if (g > 0)
      input = receive(ctx, (g - 1) % stages_, tag(0, g, false), chunks_[g / stages_]->rows(n), c);
    Tensor out;
    {
      Tracer::Span span(tracer, span_name(tracer, "forward", 0, g / stages_), "pipeline");
      out = chunks_[g / stages_]->forward(ctx, tokens, targets, input, 0.0, &loss);
    }
    if (g < g_last)
      sends.emplace_back(pp_.send_async(out, (g + 1) % stages_, tag(0, g + 1, false)), out);
  }
  for (auto& [work, tensor] : sends) work->wait();
  return loss;
}

}  // namespace kiri::model
