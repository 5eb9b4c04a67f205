#pragma once
// kiri train --init-from's config: the model folder's config.json decides the model.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/config/run_config.h"

namespace kiri::cli {

// `cfg` with model.* from dir/config.json (ckpt::hf::read_hf_config; dir from
// ckpt::resolve_model_folder). A model key in `given` (the file's and --set's keys) that
// differs is a kConfig error naming both values, as is a train.seq_len past n_positions;
// data.tokenizer, when not given, becomes the folder's (ckpt::hf::model_folder_tokenizer).
kiri::RunConfig init_from_config(kiri::RunConfig cfg, const std::string& dir,
                                 const std::vector<std::pair<std::string, nlohmann::json>>& given);

// data.dir's shards, when `given` (the file's and --set's keys) has no data.tokenizer: the
// tokenizer that made them (data::shards_tokenizer, logged), so that the shards alone say how
// to read them. A given data.tokenizer stays, and a mismatch with the shards is the Trainer's
// named error.
void use_shards_tokenizer(kiri::RunConfig& cfg,
                          const std::vector<std::pair<std::string, nlohmann::json>>& given);

}  // namespace kiri::cli
