#pragma once
// A small long-option parser: positionals, "--name value", "--name=value",
// repeatable options, and flags. Unknown options are errors naming them.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiri::cli {

class Args {
 public:
  // value_options take a value; flags don't; repeatable ones may occur often.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
       const std::set<std::string>& flags, const std::set<std::string>& repeatable = {});
  const std::vector<std::string>& positional() const { return positional_; }
  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;

 private:
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace kiri::cli
