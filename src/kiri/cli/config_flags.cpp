#include "kiri/cli/config_flags.h"

#include <map>

#include "kiri/base/error.h"

namespace kiri::cli {

const std::vector<ConfigFlag>& config_flags() {
  static const std::vector<ConfigFlag> flags = {
      {"lr", "train.lr", nullptr, "LR"},
      {"max-steps", "train.steps", nullptr, "N"},
      {"epochs", "train.epochs", nullptr, "E"},
      {"batch-size", "train.micro_batch", nullptr, "B"},
      {"grad-accum", "train.grad_accum", nullptr, "N"},
      {"output-dir", "run.dir", nullptr, "DIR"},
      {"seed", "train.seed", nullptr, "S"},
      {"bf16", "train.dtype", "bf16", ""},
      {"fp16", "train.dtype", "fp16", ""},
  };
  return flags;
}

std::vector<OptionSpec> config_flag_options() {
  std::vector<OptionSpec> out;
  for (const ConfigFlag& f : config_flags()) {
    const std::string set = std::string(f.key) + "=" + (f.value ? f.value : f.value_name);
    out.push_back({std::string("--") + f.flag, f.value ? OptionKind::kFlag : OptionKind::kValue,
                   f.value_name, "", "--set " + set});
  }
  return out;
}

std::vector<FlagSet> config_flag_sets(const Args& a) {
  std::vector<FlagSet> out;
  for (const ConfigFlag& f : config_flags()) {
    const std::string flag = std::string("--") + f.flag;
    if (f.value) {
      if (a.flag(f.flag)) out.push_back({flag, std::string(f.key) + "=" + f.value});
    } else if (const auto v = a.get(f.flag)) {
      out.push_back({flag, std::string(f.key) + "=" + *v});
    }
  }
  return out;
}

std::vector<std::string> merge_flag_sets(const std::vector<FlagSet>& flags,
                                         const std::vector<std::string>& sets) {
  std::vector<FlagSet> all = flags;
  for (const std::string& s : sets) all.push_back({"--set " + s, s});
  std::map<std::string, std::string> by_key;  // key -> the first that gave it
  std::vector<std::string> out;
  for (const FlagSet& f : all) {
    const std::string key = f.set.substr(0, f.set.find('='));
    const bool is_set = f.flag.rfind("--set ", 0) == 0;
    if (auto it = by_key.find(key);
        it != by_key.end() && !(is_set && it->second.rfind("--set ", 0) == 0))
      KIRI_RAISE(kConfig, it->second, " and ", f.flag, " both give ", key, ": give one (",
                 it->second.rfind("--set ", 0) == 0 ? f.flag : it->second, " is short for ", key,
                 ")");
    by_key.emplace(key, f.flag);
    out.push_back(f.set);
  }
  return out;
}

}  // namespace kiri::cli
