#pragma once
// `--deepspeed ds_config.json`: a DeepSpeed JSON config (as the Hugging Face Trainer's users
// have it) mapped onto kiri's config keys, key by key (docs/deepspeed.md). Every key is
// mapped, accepted as having no effect in kiri (with the reason, in `notes`), or named in
// one kConfig error that lists every key kiri cannot run with its JSON path. HF's "auto"
// takes kiri's own value (its default, or what the kiri config file or --set gave); so does
// a key the file leaves out, except the parameters of a given scheduler, which take
// DeepSpeed's defaults. A key that the file and an explicit kiri key (file or --set) both
// give must agree: a contradiction is named with both values. DeepSpeed's own console
// interval (steps_per_print) and CPU offload (the states are in host RAM already) are
// accepted with no effect.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/config/run_config.h"

namespace kiri {

struct DeepSpeedConfig {
  kiri::RunConfig config;  // the given config with the DeepSpeed file's keys applied
  // The kiri keys the file set, in order, as (key, value): what a resumed run applies on
  // its checkpoint's config.
  std::vector<std::pair<std::string, nlohmann::json>> entries;
  // The keys accepted with no effect in kiri, each with the reason ("path: why").
  std::vector<std::string> notes;
  // Each kiri key the file set -> the file's JSON path that set it (the first), which
  // validate_deepspeed names in its errors.
  std::map<std::string, std::string> path_of;
};

// kiri::validate(cfg) of a config that a DeepSpeed file (`where`) gave keys to: its error
// names the file's JSON path before each kiri key the file set ("DeepSpeed config 'ds.json':
// zero_optimization.offload_param.device (offload.parameters) = nvme needs ZeRO stage 3
// ..."). With no paths, validate(cfg) as it is.
void validate_deepspeed(const kiri::RunConfig& cfg,
                        const std::map<std::string, std::string>& path_of,
                        const std::string& where);

// Maps `ds` (the object of the file `where`) onto `cfg`, the config from kiri's defaults,
// its config file and --set; `given` are the keys those gave explicitly (config_entries),
// `world` the number of processes (train_batch_size = micro x accumulation x dp, with dp
// from the world and the layout).
DeepSpeedConfig apply_deepspeed(const nlohmann::json& ds, const std::string& where,
                                const kiri::RunConfig& cfg,
                                const std::vector<std::pair<std::string, nlohmann::json>>& given,
                                int world);

// The same from a file (read as a config file: regular, at most 16 MiB, no key twice).
DeepSpeedConfig load_deepspeed(const std::string& file, const kiri::RunConfig& cfg,
                               const std::vector<std::pair<std::string, nlohmann::json>>& given,
                               int world);

}  // namespace kiri
