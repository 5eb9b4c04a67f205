#include "kiri/cli/commands.h"

#include <omp.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/cli/args.h"
#include "kiri/cli/config_schema.h"
#include "kiri/cli/world.h"
#include "kiri/data/corpus.h"
#include "kiri/train/generate.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

using nlohmann::json;

namespace {

const char* kUsage = R"(kiri: train GPT-style transformers, cut five ways.

usage:
  kiri train [CONFIG] [--set key=value ...] [--resume CKPT_DIR] [--mem-limit 2GiB]
  kiri launch -n N [--hostfile F] [--threads T] -- train [CONFIG] [--set ...]
  kiri config [CONFIG] [--set key=value ...] [--markdown]
  kiri sample CKPT_DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]
  kiri eval CKPT_DIR [--batches N]
  kiri data INPUT.txt --out DIR [--tokenizer gpt2|byte] [--val-fraction 0.1]
  kiri bench [--config tiny|gpt2-124M] [--steps N] [--warmup N]
  kiri plan [--model NAME | --layers L --hidden H --heads A --vocab V | --params N]
            [--cluster NAME] [--nodes K | --gpus N] [--dp --tp --pp --zero-stage ...] [--json]

CONFIG is a JSON file; keys are documented in docs/config.md (kiri config --markdown).
)";

// The config of a train-like command: file, --set overrides, --mem-limit.
train::RunConfig config_of(const Args& a, size_t max_positional) {
  KIRI_CHECK_KIND(kConfig, a.positional().size() <= max_positional, "too many arguments: at most ",
                  max_positional, " CONFIG file expected");
  train::RunConfig cfg = load_config(a.positional().empty() ? "" : a.positional()[0], a.all("set"));
  if (auto m = a.get("mem-limit")) apply_key(cfg, "train.mem_limit", *m);
  validate(cfg);
  return cfg;
}

// The run config stored in a checkpoint's state.json.
train::RunConfig checkpoint_config(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  std::ifstream in(dir + "/state.json");
  KIRI_CHECK_KIND(kCheckpoint, in.good(), "cannot read ", dir, "/state.json");
  json state;
  try {
    state = json::parse(in);
  } catch (const json::exception& e) {
    KIRI_RAISE(kCheckpoint, dir, "/state.json is not valid JSON: ", e.what());
  }
  KIRI_CHECK_KIND(kCheckpoint, state.contains("config") && state["config"].is_object(), dir,
                  "/state.json has no config");
  return config_from_json(state["config"]);
}

}  // namespace

int cmd_train(const std::vector<std::string>& argv) {
  Args a(argv, {"set", "resume", "mem-limit"}, {}, {"set"});
  train::RunConfig cfg = config_of(a, 1);
  World world = make_world();
  train::Trainer trainer(cfg, *world.comm, config_to_json(cfg).dump());
  if (auto r = a.get("resume")) {
    trainer.load_checkpoint(*r);
    if (trainer.is_rank0())
      log::info("resumed from ", ckpt::resolve_checkpoint(*r), " at step ", trainer.step());
  }
  trainer.run();
  return 0;
}

int cmd_config(const std::vector<std::string>& argv) {
  Args a(argv, {"set", "mem-limit"}, {"markdown"}, {"set"});
  if (a.flag("markdown")) {
    std::cout << config_markdown();
    return 0;
  }
  std::cout << config_to_json(config_of(a, 1)).dump(2) << "\n";
  return 0;
}

int cmd_sample(const std::vector<std::string>& argv) {
  Args a(argv, {"prompt", "tokens", "temperature", "top-k", "seed"}, {});
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri sample takes one CKPT_DIR");
  const std::string dir = ckpt::resolve_checkpoint(a.positional()[0]);
  train::RunConfig cfg = checkpoint_config(dir);
  auto tokenizer = data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = tokenizer->vocab_size();
  Allocator allocator;
  model::GPT<float> model(cfg.model);
  nn::ParameterStore store(model.parameters(), DType::kF32, allocator);
  ckpt::SafetensorsFile file = ckpt::SafetensorsFile::open(dir + "/model.safetensors");
  for (nn::Parameter* p : store.parameters()) file.read_into(p->name, p->value);

  train::SampleOptions o;
  o.tokens = a.get_int("tokens", 100);
  o.temperature = a.get_double("temperature", 0.8);
  o.top_k = static_cast<int>(a.get_int("top-k", 0));
  o.seed = static_cast<uint64_t>(a.get_int("seed", 0));
  KIRI_CHECK_KIND(kConfig, o.tokens >= 0 && o.temperature >= 0 && o.top_k >= 0,
                  "--tokens, --temperature and --top-k must not be negative");
  std::string prompt = a.get("prompt").value_or("\n");
  std::vector<int32_t> ids = tokenizer->encode(prompt);
  KIRI_CHECK_KIND(kConfig, !ids.empty(), "--prompt must not be empty");
  std::vector<int32_t> out = train::generate(model, allocator, ids, o, tokenizer->vocab_size());
  std::cout << tokenizer->decode(out) << std::endl;
  return 0;
}

int cmd_eval(const std::vector<std::string>& argv) {
  Args a(argv, {"batches"}, {});
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri eval takes one CKPT_DIR");
  train::RunConfig cfg = checkpoint_config(a.positional()[0]);
  cfg.log.metrics.clear();
  // A checkpoint holds the full model whatever layout wrote it: evaluate on one process.
  cfg.parallel.dp = cfg.parallel.tp = cfg.parallel.pp = 1;
  cfg.parallel.zero_stage = cfg.parallel.shard_group_size = 0;
  cfg.parallel.sharding_strategy.clear();
  train::Trainer trainer(cfg, "");
  trainer.load_checkpoint(a.positional()[0]);
  const double loss = trainer.evaluate(a.get_int("batches", cfg.train.eval_batches));
  std::printf("val_loss %.6f (step %lld)\n", loss, static_cast<long long>(trainer.step()));
  return 0;
}

int cmd_data(const std::vector<std::string>& argv) {
  Args a(argv, {"out", "tokenizer", "val-fraction", "data-dir"}, {});
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri data takes one INPUT text file");
  KIRI_CHECK_KIND(kConfig, a.get("out").has_value(), "kiri data needs --out DIR");
  train::DataConfig dc;
  dc.dir = a.get("data-dir").value_or("");
  auto tokenizer =
      data::make_tokenizer(a.get("tokenizer").value_or("gpt2"), train::resolve_data_dir(dc));
  data::PreparedCorpus p = data::prepare_corpus(a.positional()[0], *tokenizer, *a.get("out"),
                                                a.get_double("val-fraction", 0.1));
  std::printf("%s: %lld tokens\n%s: %lld tokens\n", p.train_path.c_str(),
              static_cast<long long>(p.train_tokens), p.val_path.c_str(),
              static_cast<long long>(p.val_tokens));
  return 0;
}

int run_cli(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    std::cout << kUsage;
    return argv.empty() ? 2 : 0;
  }
  const std::string cmd = argv[0];
  const std::vector<std::string> rest(argv.begin() + 1, argv.end());
  try {
    if (cmd == "train") return cmd_train(rest);
    if (cmd == "config") return cmd_config(rest);
    if (cmd == "sample") return cmd_sample(rest);
    if (cmd == "eval") return cmd_eval(rest);
    if (cmd == "data") return cmd_data(rest);
    if (cmd == "bench") return cmd_bench(rest);
    if (cmd == "launch") return cmd_launch(rest);
    if (cmd == "plan") return cmd_plan(rest);
    std::fprintf(stderr, "kiri: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const Error& e) {
    log::error(e.what());
    return e.kind() == ErrorKind::kConfig ? 2 : 1;
  } catch (const std::exception& e) {
    log::error("unexpected: ", e.what());
    return 1;
  }
}

}  // namespace kiri::cli
