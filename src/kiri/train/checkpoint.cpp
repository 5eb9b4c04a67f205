// Trainer checkpoints: model.safetensors (Hugging Face GPT-2 names, fp32),
// optimizer.safetensors (AdamW m and v per parameter), state.json (config,
// step, data position), written into a temporary step directory that is
// renamed into place only when complete.
#include <fstream>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

using nlohmann::json;

namespace {
constexpr int kFormatVersion = 1;

std::vector<ckpt::NamedTensor> model_tensors(nn::ParameterStore& store) {
  std::vector<ckpt::NamedTensor> out;
  for (nn::Parameter* p : store.parameters()) out.push_back({p->name, p->value});
  return out;
}

std::vector<ckpt::NamedTensor> optimizer_tensors(nn::ParameterStore& store, optim::AdamW& opt) {
  std::vector<ckpt::NamedTensor> out;
  for (nn::Parameter* p : store.parameters()) {
    out.push_back(
        {"exp_avg." + p->name, opt.exp_avg().flat_range(p->offset, p->numel()).view(p->shape)});
    out.push_back({"exp_avg_sq." + p->name,
                   opt.exp_avg_sq().flat_range(p->offset, p->numel()).view(p->shape)});
  }
  return out;
}
}  // namespace

std::string Trainer::save_checkpoint() {
  const std::string& root = cfg_.checkpoint.dir;
  // Replicas are identical: rank 0 writes, the others wait until it is complete.
  if (!is_rank0()) {
    world_->barrier();
    return root + "/" + ckpt::step_dir_name(step_);
  }
  const std::string dir = ckpt::begin_checkpoint(root, step_);
  ckpt::save_safetensors(dir + "/model.safetensors", model_tensors(*store_),
                         {{"format", "pt"}, {"kiri_model", "gpt2"}});
  ckpt::save_safetensors(
      dir + "/optimizer.safetensors", optimizer_tensors(*store_, *optimizer_),
      {{"optimizer", "adamw"}, {"step", std::to_string(optimizer_->step_count())}});
  json state = {{"format_version", kFormatVersion},
                {"step", step_},
                {"optimizer_step", optimizer_->step_count()},
                {"data", {{"position", data_position_}, {"seed", cfg_.train.seed}}},
                // kiri's random numbers are counter-based: every draw is a function of
                // (seed, stream, index), so the seed and the data position are the whole state.
                {"rng", {{"seed", cfg_.train.seed}, {"kind", "counter"}}},
                {"config", config_json_.empty() ? json() : json::parse(config_json_)}};
  write_file_atomic(dir + "/state.json", state.dump(2) + "\n");
  const std::string done = ckpt::commit_checkpoint(root, step_, cfg_.checkpoint.keep_last);
  world_->barrier();
  return done;
}

void Trainer::load_checkpoint(const std::string& path) {
  const std::string dir = ckpt::resolve_checkpoint(path);
  json state;
  {
    std::ifstream in(dir + "/state.json");
    KIRI_CHECK_KIND(kCheckpoint, in.good(), "cannot read ", dir, "/state.json");
    try {
      state = json::parse(in);
      KIRI_CHECK_KIND(kCheckpoint, state.value("format_version", 0) == kFormatVersion, dir,
                      "/state.json has format_version ", state.value("format_version", 0),
                      ", this kiri reads ", kFormatVersion);
      step_ = state.at("step").get<int64_t>();
      data_position_ = state.at("data").at("position").get<uint64_t>();
      optimizer_->set_step_count(state.at("optimizer_step").get<int64_t>());
    } catch (const json::exception& e) {
      KIRI_RAISE(kCheckpoint, dir, "/state.json is malformed: ", e.what());
    }
  }
  ckpt::SafetensorsFile model_file = ckpt::SafetensorsFile::open(dir + "/model.safetensors");
  for (auto& nt : model_tensors(*store_)) model_file.read_into(nt.name, nt.tensor);
  ckpt::SafetensorsFile opt_file = ckpt::SafetensorsFile::open(dir + "/optimizer.safetensors");
  for (auto& nt : optimizer_tensors(*store_, *optimizer_)) opt_file.read_into(nt.name, nt.tensor);
}

}  // namespace kiri::train
