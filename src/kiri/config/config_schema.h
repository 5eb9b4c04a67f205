#pragma once
// The configuration schema: every dotted key (model.n_layer, train.lr, ...)
// with its type, default and documentation, in one table. Config files are
// JSON, nested ({"model": {"n_layer": 4}}) or flat ({"model.n_layer": 4});
// --set key=value overrides any key. An unknown key or a bad value is a
// kConfig error naming the key.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/config/run_config.h"

namespace kiri {

struct KeyDoc {
  std::string key;
  std::string type;  // "int", "float", "string", "bytes", "one of: a | b"
  std::string default_value;
  std::string doc;
};

// All keys, in documentation order.
std::vector<KeyDoc> config_keys();

// What load_config makes of a config file's text (`where` names it in messages): JSON
// with comments, nested or flat keys over the defaults. Nesting deeper than 64 levels, a
// key given twice (in one object, or flat and nested) and any key or value load_config
// refuses are kConfig errors.
kiri::RunConfig parse_config_text(std::string_view text, const std::string& where);
// Defaults, then the file (if any), then each "key=value" of --set, in order.
kiri::RunConfig load_config(const std::string& file, const std::vector<std::string>& sets);
// The (key, value) pairs the file (flattened) and --set give, in order, without
// applying them (unknown keys are kConfig errors): what a run was given.
std::vector<std::pair<std::string, nlohmann::json>> config_entries(
    const std::string& file, const std::vector<std::string>& sets);
// One key's value in `cfg`, as config_to_json writes it.
nlohmann::json get_key(const kiri::RunConfig& cfg, const std::string& key);
// Applies one key (value given as JSON, or as the string of --set).
void apply_key(kiri::RunConfig& cfg, const std::string& key, const nlohmann::json& value);
void apply_set(kiri::RunConfig& cfg, const std::string& key_equals_value);
// The resolved configuration as nested JSON (what `kiri config` prints and
// checkpoints store); load_config of it gives the same RunConfig back.
nlohmann::json config_to_json(const kiri::RunConfig& cfg);
kiri::RunConfig config_from_json(const nlohmann::json& j);
// Checks values that depend on each other (n_head divides n_embd, ...).
void validate(const kiri::RunConfig& cfg);
// docs/config.md, generated from the table (a test keeps the file in sync).
std::string config_markdown();

}  // namespace kiri
