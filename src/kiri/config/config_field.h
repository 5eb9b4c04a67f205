#pragma once
// The typed rows of the config schema (config_schema.cpp): each key's parser from JSON or
// --set text, range check, and getter. Internal to the schema.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/run_config.h"

namespace kiri {

// A Field's accessor: `path` of a RunConfig (KIRI_FIELD(model.n_layer)).
#define KIRI_FIELD(path)             \
  [](kiri::RunConfig & c) -> auto& { \
    return c.path;                   \
  }

struct Field {
  KeyDoc doc;
  std::function<void(kiri::RunConfig&, const nlohmann::json&)> set;
  std::function<nlohmann::json(const kiri::RunConfig&)> get;
};

// Values come from JSON files or as --set text; both are accepted for every type.
int64_t as_int(const nlohmann::json& v, const std::string& key);
double as_float(const nlohmann::json& v, const std::string& key);
std::string as_string(const nlohmann::json& v, const std::string& key);

// The model.* rows, in documentation order (config_model_fields.cpp).
void add_model_fields(std::vector<Field>& f);
// The parallel.* and offload.* rows (config_layout_fields.cpp).
void add_parallel_fields(std::vector<Field>& f);
void add_offload_fields(std::vector<Field>& f);

template <typename Access>
Field int_field(std::string key, Access acc, int64_t lo, int64_t hi, std::string doc) {
  using V = std::remove_reference_t<decltype(acc(std::declval<kiri::RunConfig&>()))>;
  Field f;
  f.doc = {key, "int", "", std::move(doc)};
  f.set = [=](kiri::RunConfig& c, const nlohmann::json& v) {
    const int64_t x = as_int(v, key);
    KIRI_CHECK_KIND(kConfig, x >= lo && x <= hi, key, " must be in [", lo, ", ", hi, "], got ", x);
    acc(c) = static_cast<V>(x);
  };
  f.get = [=](const kiri::RunConfig& c) {
    return nlohmann::json(acc(const_cast<kiri::RunConfig&>(c)));
  };
  return f;
}

template <typename Access>
Field float_field(std::string key, Access acc, double lo, double hi, std::string doc) {
  Field f;
  f.doc = {key, "float", "", std::move(doc)};
  f.set = [=](kiri::RunConfig& c, const nlohmann::json& v) {
    const double x = as_float(v, key);
    KIRI_CHECK_KIND(kConfig, x >= lo && x <= hi, key, " must be in [", lo, ", ", hi, "], got ", x);
    acc(c) = x;
  };
  f.get = [=](const kiri::RunConfig& c) {
    return nlohmann::json(acc(const_cast<kiri::RunConfig&>(c)));
  };
  return f;
}

template <typename Access>
Field string_field(std::string key, Access acc, std::string doc,
                   std::function<void(const std::string&)> check = nullptr) {
  Field f;
  f.doc = {key, "string", "", std::move(doc)};
  f.set = [=](kiri::RunConfig& c, const nlohmann::json& v) {
    std::string s = as_string(v, key);
    if (check) check(s);
    acc(c) = s;
  };
  f.get = [=](const kiri::RunConfig& c) {
    return nlohmann::json(acc(const_cast<kiri::RunConfig&>(c)));
  };
  return f;
}

template <typename Access>
Field bool_field(std::string key, Access acc, std::string doc) {
  Field f;
  f.doc = {key, "bool", "", std::move(doc)};
  f.set = [=](kiri::RunConfig& c, const nlohmann::json& v) {
    if (v.is_boolean()) {
      acc(c) = v.get<bool>();
      return;
    }
    const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
    if (s == "true" || s == "1")
      acc(c) = true;
    else if (s == "false" || s == "0")
      acc(c) = false;
    else
      KIRI_RAISE(kConfig, key, " must be true or false, got ", quote_bounded(v.dump(), 80));
  };
  f.get = [=](const kiri::RunConfig& c) {
    return nlohmann::json(acc(const_cast<kiri::RunConfig&>(c)));
  };
  return f;
}

template <typename Access, typename E>
Field enum_field(std::string key, Access acc, std::vector<std::pair<std::string, E>> names,
                 std::string doc) {
  Field f;
  std::string type = "one of:";
  for (size_t i = 0; i < names.size(); ++i) type += (i ? " | " : " ") + names[i].first;
  f.doc = {key, type, "", std::move(doc)};
  f.set = [=](kiri::RunConfig& c, const nlohmann::json& v) {
    const std::string s = as_string(v, key);
    for (auto& [n, e] : names)
      if (n == s) {
        acc(c) = e;
        return;
      }
    KIRI_RAISE(kConfig, key, " must be ", type.substr(8), ", got '", quote_bounded(s, 80), "'");
  };
  f.get = [=](const kiri::RunConfig& c) -> nlohmann::json {
    for (auto& [n, e] : names)
      if (acc(const_cast<kiri::RunConfig&>(c)) == e) return n;
    return nullptr;
  };
  return f;
}

}  // namespace kiri
