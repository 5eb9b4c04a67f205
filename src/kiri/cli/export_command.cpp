// kiri export CKPT --out DIR: a Hugging Face model folder (hf_model.h) from a kiri
// checkpoint of any layout, in the dtype and shard size asked for.
#include <cstdio>
#include <filesystem>

#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_state.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/verbs.h"
#include "kiri/config/config_schema.h"
#include "kiri/train/trainer.h"

namespace kiri::cli {

namespace fs = std::filesystem;

namespace {

// An --out that does not exist, or an empty folder; anything else is named and refused.
void check_out(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(out, ec))) return;
  KIRI_CHECK_KIND(kConfig, fs::is_directory(out, ec) && fs::is_empty(out, ec), "--out ", out,
                  " exists and is not an empty folder: give a new folder (kiri export never "
                  "writes over files)");
}

}  // namespace

int cmd_export(const std::vector<std::string>& argv) {
  Args a(argv, verb_spec("export"));
  KIRI_CHECK_KIND(kConfig, a.positional().size() == 1, "kiri export takes one CKPT_DIR");
  KIRI_CHECK_KIND(kConfig, a.get("out").has_value(), "kiri export needs --out DIR");
  const std::string out = *a.get("out");
  const DType dtype = parse_dtype(a.get("dtype").value_or("fp32"));
  const int64_t shard = ckpt::hf::parse_max_shard_size(
      a.get("max-shard-size").value_or(ckpt::hf::kDefaultMaxShardSize), "--max-shard-size");
  check_out(out);
  const std::string dir = ckpt::resolve_checkpoint(a.positional()[0]);
  const ckpt::CheckpointState state = ckpt::read_checkpoint_state(dir);
  KIRI_CHECK_KIND(kCheckpoint, state.config.is_object(), dir, "/state.json has no config");
  kiri::RunConfig cfg = config_from_json(state.config);
  auto tokenizer = data::make_tokenizer(cfg.data.tokenizer, train::resolve_data_dir(cfg.data));
  kiri::resolve(cfg, {.tokenizer_vocab = tokenizer->vocab_size(), .tokenizer = tokenizer->name()});

  // The whole model in fp32, checked as a resume checks it, in the model's order.
  Allocator alloc;
  model::GPT<float> model(cfg.model);
  ckpt::hf::HfWeights weights = ckpt::hf::HfWeights::open(dir);
  std::vector<std::string> names;
  for (nn::Parameter* p : model.parameters()) names.push_back(p->name);
  weights.check_names(names);
  std::vector<ckpt::NamedTensor> tensors;
  for (nn::Parameter* p : model.parameters()) {
    Tensor t = Tensor::empty(p->shape, DType::kF32, Category::kBuffers, alloc);
    weights.read(p->name, t);
    train::check_finite(t, weights.path_of(p->name) + ": tensor " + p->name);
    tensors.push_back({p->name, t});
  }
  // Written beside --out and renamed into place: a failed export leaves no half folder.
  const std::string tmp = out + ".kiri-export.tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    ckpt::hf::write_hf_folder(tmp, cfg.model, *tokenizer, cfg.data.tokenizer, tensors, dtype,
                              shard);
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(out)) files += e.is_regular_file();
  std::printf("exported %s (step %lld) to %s: %zu files, %s weights\n", dir.c_str(),
              static_cast<long long>(state.step), out.c_str(), files, dtype_name(dtype));
  return 0;
}

}  // namespace kiri::cli
