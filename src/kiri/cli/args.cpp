#include "kiri/cli/args.h"

#include "kiri/base/error.h"

namespace kiri::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
           const std::set<std::string>& flags, const std::set<std::string>& repeatable) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (flags.count(name)) {
      KIRI_CHECK_KIND(kConfig, !has_value, "--", name, " takes no value");
      flags_.insert(name);
    } else if (value_options.count(name)) {
      if (!has_value) {
        KIRI_CHECK_KIND(kConfig, i + 1 < argv.size(), "--", name, " needs a value");
        value = argv[++i];
      }
      KIRI_CHECK_KIND(kConfig, repeatable.count(name) || !values_.count(name), "--", name,
                      " given twice");
      values_.emplace(name, value);
    } else {
      std::string known;
      for (auto& o : value_options) known += " --" + o;
      for (auto& o : flags) known += " --" + o;
      KIRI_RAISE(kConfig, "unknown option --", name, " (this command takes:", known, ")");
    }
  }
}

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  std::vector<std::string> out;
  for (auto [it, end] = values_.equal_range(name); it != end; ++it) out.push_back(it->second);
  return out;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    const long long x = std::stoll(*v, &pos);
    if (pos == v->size()) return x;
  } catch (const std::exception&) {
  }
  KIRI_RAISE(kConfig, "--", name, " must be an integer, got '", *v, "'");
}

double Args::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  try {
    size_t pos = 0;
    const double x = std::stod(*v, &pos);
    if (pos == v->size()) return x;
  } catch (const std::exception&) {
  }
  KIRI_RAISE(kConfig, "--", name, " must be a number, got '", *v, "'");
}

}  // namespace kiri::cli
