#pragma once
// The command line of one verb, parsed by CLI11 from the verb's option table
// (verbs.cpp): positionals, "--name value", "--name=value", repeatable options and
// flags. A mistyped option is an error that suggests the closest one; -h/--help
// anywhere before "--" asks for the verb's help instead of parsing.
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiri/tensor/dtype.h"

namespace kiri::cli {

enum class OptionKind {
  kFlag,      // --json: present or not
  kValue,     // --out DIR: at most once
  kRepeated,  // --set KEY=VALUE: any number of times, in order
};

// One row of a verb's option table.
struct OptionSpec {
  std::string names;  // as typed: "--mem-limit", "-n", "-h,--help"
  OptionKind kind = OptionKind::kValue;
  std::string value_name;    // "BYTES" in "--mem-limit BYTES"; values only
  std::string default_text;  // what applies when the option is absent; "" for flags
  std::string help;          // one line
};

struct VerbSpec {
  std::string name;         // "train"
  std::string positionals;  // "[CONFIG]": the usage line's arguments
  size_t min_positionals = 0;
  size_t max_positionals = 0;
  std::string summary;  // one line, for `kiri --help`
  std::vector<OptionSpec> options;
};

// The key an option is read by: its long name without "--" ("mem-limit"), else its
// short name without "-" ("n").
std::string option_key(const OptionSpec& o);
// Its first long name with dashes ("--mem-limit"), else its short one ("-n").
std::string option_flag(const OptionSpec& o);

// `kiri VERB --help`: the usage line, the summary and every option with its value name,
// default and description.
std::string help_text(const VerbSpec& spec);

// A --dtype value: fp32, bf16 or fp16 (or float32, bfloat16, float16); kConfig naming the
// value otherwise.
DType parse_dtype(const std::string& s);

// Thrown by Args for -h/--help; run_cli prints it and exits 0.
class HelpRequested : public std::exception {
 public:
  explicit HelpRequested(std::string text) : text_(std::move(text)) {}
  const char* what() const noexcept override { return text_.c_str(); }

 private:
  std::string text_;
};

class Args {
 public:
  // Throws kConfig for an unknown option (naming the closest known one), a missing value,
  // a non-repeatable option given twice, a value given to a flag, or a positional count
  // outside the spec's bounds; HelpRequested for -h/--help.
  Args(const std::vector<std::string>& argv, const VerbSpec& spec);
  const std::vector<std::string>& positional() const { return positional_; }
  std::optional<std::string> get(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  bool flag(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;

 private:
  // A name read but not in the table is kiri's bug, not the user's.
  void check_known(const std::string& name) const;

  std::map<std::string, std::string> flag_of_;  // key -> as typed: "n" -> "-n"
  std::vector<std::string> positional_;
  std::multimap<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace kiri::cli
