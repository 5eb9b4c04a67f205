#include "kiri/train/trainer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/base/units.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/data/corpus.h"
#include "kiri/data/shard.h"
#include "kiri/train/plot.h"

namespace kiri::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::string resolve_data_dir(const DataConfig& cfg) {
  if (!cfg.dir.empty()) return cfg.dir;
  if (const char* env = std::getenv("KIRI_DATA_DIR"); env && *env) return env;
  return KIRI_DEFAULT_DATA_DIR;
}

CorpusShards prepare_corpus_shards(const DataConfig& cfg, const data::Tokenizer& tokenizer) {
  const std::string dir = resolve_data_dir(cfg);
  std::string text, out;
  if (cfg.corpus == "moby-dick") {
    text = dir + "/moby-dick.txt";
    KIRI_CHECK_KIND(kData, fs::exists(text), "the default corpus ", text,
                    " is missing: run scripts/bootstrap.sh (make setup) or set data.dir");
    out = dir + "/tokens/moby-dick." + tokenizer.name();
  } else {
    text = cfg.corpus;
    out = cfg.corpus + ".kiri-" + tokenizer.name();
  }
  data::PreparedCorpus p = data::ensure_prepared(text, tokenizer, out, cfg.val_fraction);
  return {p.train_path, p.val_path};
}

Trainer::Trainer(RunConfig cfg, std::string config_json)
    : cfg_(std::move(cfg)), config_json_(std::move(config_json)) {
  const TrainConfig& t = cfg_.train;
  KIRI_CHECK_KIND(kConfig, cfg_.parallel.dp * cfg_.parallel.tp * cfg_.parallel.pp == 1,
                  "parallel.dp x tp x pp = ", cfg_.parallel.dp, " x ", cfg_.parallel.tp, " x ",
                  cfg_.parallel.pp, " = ", cfg_.parallel.dp * cfg_.parallel.tp * cfg_.parallel.pp,
                  " but this run has 1 process");
  if (!t.mem_limit.empty()) allocator_.set_limit(parse_bytes(t.mem_limit));

  tokenizer_ = data::make_tokenizer(cfg_.data.tokenizer, resolve_data_dir(cfg_.data));
  if (cfg_.model.vocab_size == 0) {
    cfg_.model.vocab_size = tokenizer_->vocab_size();
    if (!config_json_.empty()) {  // checkpoints store the resolved size
      json j = json::parse(config_json_);
      j["model"]["vocab_size"] = cfg_.model.vocab_size;
      config_json_ = j.dump();
    }
  }
  KIRI_CHECK_KIND(kConfig, cfg_.model.vocab_size >= tokenizer_->vocab_size(),
                  "model.vocab_size = ", cfg_.model.vocab_size, " is smaller than the ",
                  tokenizer_->name(), " tokenizer's vocabulary of ", tokenizer_->vocab_size());
  KIRI_CHECK_KIND(kConfig, t.seq_len <= cfg_.model.block_size, "train.seq_len = ", t.seq_len,
                  " exceeds model.block_size = ", cfg_.model.block_size);

  CorpusShards shards = prepare_corpus_shards(cfg_.data, *tokenizer_);
  train_stream_ = std::make_unique<data::SampleStream>(data::read_shard(shards.train_path).tokens,
                                                       t.seq_len, t.seed);
  val_stream_ = std::make_unique<data::SampleStream>(data::read_shard(shards.val_path).tokens,
                                                     t.seq_len, t.seed);

  model_ = std::make_unique<model::GPT<float>>(cfg_.model);
  store_ = std::make_unique<nn::ParameterStore>(model_->parameters(), DType::kF32, allocator_);
  store_->initialize(t.seed);
  optimizer_ = std::make_unique<optim::AdamW>(*store_, t.optimizer, allocator_);
  inputs_ = Tensor::empty({t.micro_batch, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
  targets_ = Tensor::empty({t.micro_batch, t.seq_len}, DType::kI32, Category::kBuffers, allocator_);
  peak_flops_ = measure_gemm_peak_flops();
}

Trainer::~Trainer() = default;

void Trainer::fill_batch(data::SampleStream& stream, uint64_t first, bool sequential) {
  const int64_t b = inputs_.dim(0), t = inputs_.dim(1);
  int32_t* x = inputs_.data<int32_t>();
  int32_t* y = targets_.data<int32_t>();
  for (int64_t i = 0; i < b; ++i) {
    if (sequential)
      stream.fill_sequential((first + i) % stream.num_samples(), x + i * t, y + i * t);
    else
      stream.fill(first + i, x + i * t, y + i * t);
  }
}

StepMetrics Trainer::train_step() {
  const TrainConfig& t = cfg_.train;
  Timer timer;
  nn::Context ctx{allocator_};
  store_->zero_grad();
  const int64_t tokens = t.micro_batch * t.seq_len * t.grad_accum;
  const double weight = 1.0 / static_cast<double>(tokens);
  double loss_sum = 0;
  for (int64_t micro = 0; micro < t.grad_accum; ++micro) {
    fill_batch(*train_stream_, data_position_, false);
    data_position_ += static_cast<uint64_t>(t.micro_batch);
    loss_sum += model_->forward(ctx, inputs_, targets_, weight);
    model_->backward(ctx);
  }
  const double lr = optim::lr_at(step_, t.optimizer.lr, t.warmup, t.steps, t.min_lr);
  const double norm = optimizer_->clip_and_step(lr);
  ++step_;
  return make_metrics(loss_sum * weight, lr, norm, timer.seconds());
}

StepMetrics Trainer::make_metrics(double loss, double lr, double norm, double seconds) {
  const TrainConfig& t = cfg_.train;
  StepMetrics m;
  m.step = step_;
  m.total_steps = t.steps;
  m.loss = loss;
  m.lr = lr;
  m.grad_norm = norm;
  m.tokens = t.micro_batch * t.seq_len * t.grad_accum;
  m.step_s = seconds;
  m.tokens_per_s = static_cast<double>(m.tokens) / seconds;
  m.mfu = cfg_.model.flops_per_token(t.seq_len) * m.tokens_per_s / peak_flops_;
  m.mem = allocator_.stats();
  return m;
}

double Trainer::evaluate(int64_t n_batches) {
  nn::Context ctx{allocator_, /*training=*/false};
  const int64_t b = cfg_.train.micro_batch;
  n_batches = std::min<int64_t>(n_batches, (val_stream_->num_samples() + b - 1) / b);
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n_batches; ++i) {
    fill_batch(*val_stream_, static_cast<uint64_t>(i * b), true);
    sum += model_->forward(ctx, inputs_, targets_, 0.0);
    count += inputs_.numel();
  }
  return sum / static_cast<double>(count);
}

void Trainer::run() {
  const TrainConfig& t = cfg_.train;
  log::info("model: ", cfg_.model.num_parameters(), " parameters (n_layer ", cfg_.model.n_layer,
            ", n_head ", cfg_.model.n_head, ", n_embd ", cfg_.model.n_embd, ", vocab ",
            cfg_.model.vocab_size, "); data: ", train_stream_->num_samples(), " train / ",
            val_stream_->num_samples(), " val samples of ", t.seq_len, " tokens (",
            tokenizer_->name(), ")");
  log::info("global_batch = micro_batch x dp x grad_accum = ", t.micro_batch, " x ",
            cfg_.parallel.dp, " x ", t.grad_accum, " = ", t.micro_batch * t.grad_accum,
            " sequences of ", t.seq_len, " tokens; GEMM peak ",
            static_cast<int64_t>(peak_flops_ / 1e9), " GFLOP/s");
  MetricsWriter metrics(cfg_.log.metrics, /*append=*/step_ > 0);
  std::vector<double> xs, losses, val_x, val_losses;
  while (step_ < t.steps) {
    StepMetrics m = train_step();
    const bool last = step_ == t.steps;
    if ((t.eval_every > 0 && step_ % t.eval_every == 0) || last) {
      m.val_loss = evaluate(t.eval_batches);
      val_x.push_back(double(step_));
      val_losses.push_back(*m.val_loss);
    }
    xs.push_back(double(step_));
    losses.push_back(m.loss);
    metrics.write(m);
    if (step_ % cfg_.log.every == 0 || last || m.val_loss)
      std::printf("%s\n", progress_line(m).c_str());
    std::fflush(stdout);
    if (!cfg_.checkpoint.dir.empty() &&
        ((cfg_.checkpoint.every > 0 && step_ % cfg_.checkpoint.every == 0) || last)) {
      const std::string dir = save_checkpoint();
      log::info("saved checkpoint ", dir);
    }
  }
  std::string plot = cfg_.log.plot;
  if (plot.empty() && !cfg_.log.metrics.empty())
    plot = fs::path(cfg_.log.metrics).replace_extension(".png").string();
  if (!plot.empty() && !xs.empty()) {
    write_line_plot_png(
        plot, {{"train", xs, losses, 0x1f77b4}, {"validation", val_x, val_losses, 0xd62728}},
        "kiri: loss", "step", "loss (nats/token)");
    log::info("wrote the loss curve ", plot);
  }
}

}  // namespace kiri::train
