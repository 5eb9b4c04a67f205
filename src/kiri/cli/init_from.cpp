#include "kiri/cli/init_from.h"

#include "kiri/base/log.h"
#include "kiri/ckpt/hf/hf_model.h"
#include "kiri/config/config_schema.h"
#include "kiri/data/dataset.h"
#include "kiri/launch/world.h"

namespace kiri::cli {

using nlohmann::json;

kiri::RunConfig init_from_config(kiri::RunConfig cfg, const std::string& dir,
                                 const std::vector<std::pair<std::string, json>>& given) {
  const ckpt::hf::HfConfig hf = ckpt::hf::read_hf_config(dir);
  kiri::RunConfig from = cfg;
  from.model = hf.model;
  bool tokenizer_given = false;
  for (const auto& [key, value] : given) {
    tokenizer_given = tokenizer_given || key == "data.tokenizer";
    if (key.rfind("model.", 0) != 0) continue;
    kiri::RunConfig probe = from;
    apply_key(probe, key, value);
    if (key == "model.vocab_size" && get_key(probe, key) == 0) continue;  // "the tokenizer's"
    KIRI_CHECK_KIND(
        kConfig, get_key(probe, key) == get_key(from, key), key, " = ", get_key(probe, key).dump(),
        " contradicts ", dir, "/config.json (", key, " = ", get_key(from, key).dump(),
        "): --init-from takes the model's shape from its config.json; drop the ", key, " you give");
  }
  KIRI_CHECK_KIND(kConfig, from.train.seq_len <= hf.model.block_size,
                  "train.seq_len = ", from.train.seq_len, " exceeds the model's ",
                  hf.model.llama() ? "max_position_embeddings" : "n_positions", " = ",
                  hf.model.block_size, " (", dir,
                  "/config.json): give --set train.seq_len=", hf.model.block_size, " or less");
  const bool rank0 = launch::job_rank() <= 0;
  // Asked only when not given: a given data.tokenizer needs nothing of the folder's.
  const std::string tokenizer = tokenizer_given ? "" : ckpt::hf::model_folder_tokenizer(dir, hf);
  if (!tokenizer.empty() && tokenizer != from.data.tokenizer) {
    if (rank0) log::info("--init-from: data.tokenizer = ", tokenizer, " (the model folder's)");
    from.data.tokenizer = tokenizer;
  }
  if (rank0)
    for (const std::string& n : hf.notes) log::info("--init-from: ", n);
  return from;
}

void use_shards_tokenizer(kiri::RunConfig& cfg,
                          const std::vector<std::pair<std::string, json>>& given) {
  if (cfg.data.dir.empty()) return;
  for (const auto& entry : given)
    if (entry.first == "data.tokenizer") return;
  const std::string t = data::shards_tokenizer(cfg.data.dir);
  if (t.empty() || t == cfg.data.tokenizer) return;
  if (launch::job_rank() <= 0)
    log::info("data.tokenizer = ", t, " (the one that made the shards in ", cfg.data.dir, ")");
  cfg.data.tokenizer = t;
}

}  // namespace kiri::cli
