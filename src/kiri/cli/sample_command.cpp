// kiri sample and kiri eval: a kiri checkpoint or any Hugging Face model folder in (kiri's
// export, or one that transformers saved), text or a validation loss out.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/init_from.h"
#include "kiri/cli/verbs.h"
#include "kiri/config/config_schema.h"
#include "kiri/train/generate.h"
#include "kiri/train/run_dir.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The bounds of sample's --tokens and eval's --batches (train.eval_batches' own).
constexpr int64_t kMaxSampleTokens = int64_t{1} << 20;
constexpr int64_t kMaxEvalBatches = int64_t{1} << 20;
// A prompts file is text for a few prompts, not a corpus.
constexpr uint64_t kMaxPromptsBytes = uint64_t{64} << 20;

// What sample and eval read: a kiri checkpoint (state.json beside the weights: its run
// config decides model and data) or a model folder (config.json decides the model).
struct ModelSource {
  std::string dir;
  bool checkpoint = false;
  kiri::RunConfig cfg;  // a checkpoint's run config; a folder's: the defaults with its model
};

ModelSource open_model_source(const std::string& path) {
  ModelSource m;
  std::error_code ec;
  if (fs::exists(path + "/config.json", ec) && !fs::exists(path + "/state.json", ec)) {
    m.dir = path;  // a model folder; a checkpoint root or step folder otherwise
    return m;
  }
  m.checkpoint = true;
  m.dir = ckpt::resolve_checkpoint(path);
  const ckpt::CheckpointState state = ckpt::read_checkpoint_state(m.dir);
  KIRI_CHECK_KIND(kCheckpoint, state.config.is_object(), m.dir, "/state.json has no config");
  m.cfg = config_from_json(state.config);
  return m;
}

// sample --logits FILE: the next-token logits after each prefix of the prompt, [T, V] fp32,
// for comparing kiri's forward with another implementation's (tests/cli/hf_llama_test.cpp).
// Each row is a forward of its prefix: next_token_logits keeps no state, and causal attention
// makes row t the full sequence's.
void write_prompt_logits(const std::string& path, model::GPT<float>& model, Allocator& allocator,
                         const std::vector<int32_t>& ids) {
  const int64_t t = static_cast<int64_t>(ids.size()), v = model.config().vocab_size;
  KIRI_CHECK_KIND(kConfig, t <= model.config().block_size, "--logits: the prompt's ", t,
                  " tokens exceed the model's block_size = ", model.config().block_size);
  nn::Context ctx{allocator, /*training=*/false};
  std::string bytes;
  bytes.reserve(static_cast<size_t>(t * v) * sizeof(float));
  for (int64_t i = 1; i <= t; ++i) {
    Tensor x = Tensor::empty({1, i}, DType::kI32, Category::kActivations, allocator);
    std::copy(ids.begin(), ids.begin() + i, x.data<int32_t>());
    const Tensor logits = model.next_token_logits(ctx, x);  // [V]
    bytes.append(static_cast<const char*>(logits.raw()), static_cast<size_t>(v) * sizeof(float));
  }
  write_file_atomic(path, bytes);
}

// The prompts: --prompt's one, or --prompts FILE's (a .jsonl: each line an object with a
// string "prompt"; else each non-blank line is one). kConfig naming the file and line.
std::vector<std::string> read_prompts(const Args& a) {
  const std::optional<std::string> file = a.get("prompts");
  KIRI_CHECK_KIND(kConfig, !file || !a.get("prompt"),
                  "--prompt and --prompts both give the prompts: give one of them");
  if (!file) return {a.get("prompt").value_or("\n")};
  const std::string text = read_small_file(*file, kMaxPromptsBytes, ErrorKind::kConfig, "prompts");
  const bool jsonl = file->size() > 6 && file->compare(file->size() - 6, 6, ".jsonl") == 0;
  std::vector<std::string> prompts;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!jsonl) {
      prompts.push_back(line);
      continue;
    }
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    KIRI_CHECK_KIND(kConfig,
                    j.is_object() && j.contains("prompt") && j["prompt"].is_string() &&
                        !j["prompt"].get<std::string>().empty(),
                    "--prompts ", *file, " line ", n,
                    ": not a JSON object with a non-empty string \"prompt\"");
    prompts.push_back(j["prompt"].get<std::string>());
  }
  KIRI_CHECK_KIND(kConfig, !prompts.empty(), "--prompts ", *file, " holds no prompt");
  return prompts;
}

// --temperature, --top-k, --top-p, --seed, --tokens and --stop-at-eos, checked.
train::SampleOptions sample_options(const Args& a, const data::Tokenizer& tokenizer) {
  train::SampleOptions o;
  o.tokens = a.get_int("tokens", 100);
  o.temperature = a.get_double("temperature", 0.8);
  o.top_p = a.get_double("top-p", 1.0);
  const int64_t top_k = a.get_int("top-k", 0), seed = a.get_int("seed", 0);
  // Checked before the narrowing casts: 2^40 would wrap to a small top-k, -1 to a huge seed.
  KIRI_CHECK_KIND(kConfig, o.tokens >= 0 && o.tokens <= kMaxSampleTokens,
                  "--tokens must be in [0, ", kMaxSampleTokens, "], got ", o.tokens);
  KIRI_CHECK_KIND(kConfig, o.temperature >= 0 && std::isfinite(o.temperature),
                  "--temperature must be a finite number >= 0, got ", o.temperature);
  KIRI_CHECK_KIND(kConfig, top_k >= 0 && top_k <= tokenizer.vocab_size(), "--top-k must be in [0, ",
                  tokenizer.vocab_size(), "] (0: all; the vocabulary's size), got ", top_k);
  KIRI_CHECK_KIND(kConfig, o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1], got ", o.top_p);
  KIRI_CHECK_KIND(kConfig, seed >= 0, "--seed must not be negative, got ", seed);
  o.top_k = static_cast<int>(top_k);
  o.seed = static_cast<uint64_t>(seed);
  if (a.flag("stop-at-eos")) {
    o.stop_token = tokenizer.eot_token();
    KIRI_CHECK_KIND(kConfig, o.stop_token >= 0, "--stop-at-eos: the tokenizer ", tokenizer.name(),
                    " has no end-of-text token");
  }
  return o;
}

// The model's weights from the folder, checked finite.
void load_weights(const std::string& dir, nn::ParameterStore& store) {
  ckpt::hf::HfWeights file = ckpt::hf::HfWeights::open(dir);
  std::vector<std::string> names;
  for (nn::Parameter* p : store.parameters()) names.push_back(p->name);
  file.check_names(names);
  for (nn::Parameter* p : store.parameters()) {
    file.read(p->name, p->value);
    train::check_finite(p->value, file.path_of(p->name) + ": tensor " + p->name);
  }
}

}  // namespace

int cmd_sample(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("sample"));
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1,
                  "kiri sample takes one MODEL (a checkpoint or a model folder)");
  ModelSource m = open_model_source(a.positional()[0]);
  kiri::RunConfig& cfg = m.cfg;
  if (!m.checkpoint) {
    const ckpt::hf::HfConfig hf = ckpt::hf::read_hf_config(m.dir);
    cfg.model = hf.model;
    cfg.data.tokenizer = ckpt::hf::model_folder_tokenizer(m.dir, hf);
    KIRI_CHECK_KIND(kConfig, !cfg.data.tokenizer.empty() || a.get("tokenizer"), m.dir,
                    " holds no tokenizer (tokenizer.json, or vocab.json + merges.txt) and its "
                    "config.json names none: give --tokenizer (byte, gpt2, or a tokenizer's path)");
  }
  if (const auto t = a.get("tokenizer")) cfg.data.tokenizer = *t;
  auto tokenizer = data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
  kiri::resolve(cfg, {.tokenizer_vocab = tokenizer->vocab_size(), .tokenizer = tokenizer->name()});
  const train::SampleOptions o = sample_options(a, *tokenizer);
  const std::vector<std::string> prompts = read_prompts(a);
  Allocator allocator;
  model::GPT<float> model(cfg.model);
  nn::ParameterStore store(model.parameters(), DType::kF32, allocator);
  load_weights(m.dir, store);
  for (const std::string& prompt : prompts) {
    const std::vector<int32_t> ids = tokenizer->encode(prompt);
    KIRI_CHECK_KIND(kConfig, !ids.empty(), "--prompt must not be empty");
    if (const auto path = a.get("logits")) write_prompt_logits(*path, model, allocator, ids);
    // Streamed: the prompt, then each token as it comes (flushed), the stop token unprinted.
    std::cout << tokenizer->decode(ids) << std::flush;
    train::generate(model, allocator, ids, o, tokenizer->vocab_size(), [&](int32_t id) {
      if (id != o.stop_token)
        std::cout << tokenizer->decode(std::vector<int32_t>{id}) << std::flush;
    });
    std::cout << std::endl;
  }
  return 0;
}

int cmd_eval(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("eval"));
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1,
                  "kiri eval takes one MODEL (a checkpoint or a model folder)");
  ModelSource m = open_model_source(a.positional()[0]);
  std::vector<std::string> sets = a.all("set");
  const std::optional<std::string> data_dir = a.get("data");
  if (data_dir) sets.push_back("data.dir=" + *data_dir);
  const std::vector<std::pair<std::string, json>> given = config_entries("", sets);
  kiri::RunConfig cfg;
  if (m.checkpoint) {
    cfg = m.cfg;
    if (data_dir) cfg.data.corpus.clear();  // another corpus: the shards of --data
    for (const auto& [key, value] : given) apply_key(cfg, key, value);
  } else {
    cfg = load_config("", sets);
    use_shards_tokenizer(cfg, given);
    cfg = init_from_config(cfg, m.dir, given);
  }
  // Zero batches averaged nothing and printed val_loss -nan: train.eval_batches' range.
  const int64_t batches = a.get_int("batches", cfg.train.eval_batches);
  KIRI_CHECK_KIND(kConfig, batches >= 1 && batches <= kMaxEvalBatches, "--batches must be in [1, ",
                  kMaxEvalBatches, "], got ", batches);
  cfg.log.metrics.clear();
  // A checkpoint holds the full model whatever layout wrote it: evaluate on one process.
  cfg.parallel.dp = cfg.parallel.tp = cfg.parallel.pp = 1;
  cfg.parallel.zero_stage = cfg.parallel.shard_group_size = 0;
  cfg.parallel.sharding_strategy = ShardingStrategy::kFromZeroStage;
  cfg.train.lr_scaling = kiri::LrScaling::kNone;  // no optimizer step
  train::Trainer trainer(cfg, "");
  if (m.checkpoint) {
    // --data asks for other shards: the checkpoint's fingerprint of its own cannot match.
    trainer.accept_data_change(a.flag("accept-data-change") || data_dir.has_value());
    trainer.load_checkpoint(m.dir);
    std::printf("val_loss %.6f (step %lld)\n", trainer.evaluate(batches),
                static_cast<long long>(trainer.step()));
  } else {
    trainer.init_from(m.dir);
    std::printf("val_loss %.6f (model folder %s)\n", trainer.evaluate(batches), m.dir.c_str());
  }
  return 0;
}

}  // namespace kiri::cli
