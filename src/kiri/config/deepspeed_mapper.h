#pragma once
// The DeepSpeed config mapper's class, shared by deepspeed_config.cpp (precision, optimizer,
// scheduler, ZeRO, batch) and deepspeed_offload.cpp (offload and aio): internal to the DeepSpeed
// reader.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/deepspeed_config.h"

namespace kiri::deepspeed_detail {

using kiri::RunConfig;
using nlohmann::json;

bool is_auto(const json& v);
std::string shown(const json& v);  // the value as JSON, at most 80 characters

// Maps one DeepSpeed config onto a kiri config; run() raises the problems all at once.
class Mapper {
 public:
  Mapper(const json& ds, std::string where, const RunConfig& cfg,
         const std::vector<std::pair<std::string, json>>& given, int world)
      : ds_(ds), where_(std::move(where)), cfg_(cfg), world_(world) {
    for (const auto& [key, value] : given) given_.insert(key);
  }

  DeepSpeedConfig run();

 private:
  // `key` = `value`, from the file's `path`. A key given explicitly with another value is a
  // problem, unless `soft` (the value does not change what the run does: it is skipped).
  void set(const std::string& path, const std::string& key, const json& value, bool soft = false) {
    RunConfig probe = cfg_;
    try {
      apply_key(probe, key, value);
    } catch (const Error& e) {
      problems_.push_back(str(path, " = ", shown(value), ": ", e.message()));
      return;
    }
    const json before = get_key(cfg_, key), after = get_key(probe, key);
    if (before != after && given_.count(key)) {
      if (!soft)
        problems_.push_back(str(path, " gives ", key, " = ", after.dump(),
                                ", but kiri's config or --set gives ", key, " = ", before.dump(),
                                ": drop one, or make them agree"));
      return;
    }
    cfg_ = probe;
    out_.entries.emplace_back(key, after);
    out_.path_of.emplace(key, path);  // the first path that set it
  }

  void unsupported(const std::string& path, const json& v, const std::string& why) {
    problems_.push_back(str(path, " = ", shown(v), ": not supported: ", why));
  }

  void no_effect(const std::string& path, const std::string& why) {
    out_.notes.push_back(str(path, ": no effect in kiri (", why, ")"));
  }

  // A key that kiri runs only at one value: `ok` (or "auto") has no effect, anything else
  // is unsupported.
  void only(const std::string& path, const json& v, const json& ok, const std::string& why_ok,
            const std::string& why_not) {
    if (is_auto(v) || v == ok)
      no_effect(path, why_ok);
    else
      unsupported(path, v, why_not);
  }

  bool is_object(const std::string& path, const json& v) {
    if (v.is_object()) return true;
    problems_.push_back(str(path, " must be a JSON object, got ", shown(v)));
    return false;
  }

  std::optional<double> number(const std::string& path, const json& v) {
    if (v.is_number()) return v.get<double>();
    problems_.push_back(str(path, " must be a number, got ", shown(v)));
    return std::nullopt;
  }

  void precision();
  void fp16_keys(const json& fp16);
  void optimizer(const json& o);
  void scheduler(const json& s);
  void scheduler_params(const std::string& type, const json& params);
  void zero(const json& z);
  void zero_key(const std::string& path, const std::string& k, const json& v);
  // deepspeed_offload.cpp: offload_optimizer, offload_param, the old cpu_offload keys, aio.
  void offload(const std::string& path, const json& o, bool param);
  void offload_key(const std::string& path, const std::string& k, const json& v, bool param,
                   bool nvme);
  void optimizer_key(const std::string& path, const std::string& k, const json& v, bool nvme);
  void param_key(const std::string& path, const std::string& k, const json& v);
  void typed_no_effect(const std::string& path, const json& v, bool typed, const char* type,
                       const std::string& why);
  void cpu_offload(const std::string& path, const json& v, const char* key);
  // `"device": "cpu"` (or cpu_offload true): the states stay in host RAM, kiri's offload
  // `none`; a contradiction with a given kiri offload key is a problem.
  void host_offload(const std::string& path, const char* key, const json& as_given);
  void aio(const std::string& path, const json& a);
  // set() for a kiri key that two DeepSpeed keys map onto (offload.path from both
  // nvme_paths): the second must agree with the first.
  // `as_given`: the file's value, for the message (`"cpu"` maps to none).
  void set_shared(const std::string& path, const std::string& key, const json& value,
                  const json& as_given = nullptr);
  void activation_checkpointing(const json& a);
  void top_level();
  void monitor(const std::string& path, const json& m, const char* key);
  void batch();
  void infer_batch(const char* path, const char* key, int64_t total, int64_t other,
                   const char* other_name);

  const json& ds_;
  std::string where_;
  RunConfig cfg_;
  std::set<std::string> given_;
  int world_;
  DeepSpeedConfig out_;
  std::vector<std::string> problems_;
  struct Shared {
    std::string path;
    json value, as_given;
  };
  std::map<std::string, Shared> shared_;  // kiri key -> the first DeepSpeed key that set it
};

}  // namespace kiri::deepspeed_detail
