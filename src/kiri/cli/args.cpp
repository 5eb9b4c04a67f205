#include "kiri/cli/args.h"

#include <CLI/CLI.hpp>
#include <memory>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/suggest.h"

namespace kiri::cli {

namespace {

// The names of "-h,--help": {"-h", "--help"}.
std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = std::min(names.find(',', start), names.size());
    if (comma > start) out.push_back(names.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string usage_line(const VerbSpec& spec) {
  return "kiri " + spec.name + " [options]" +
         (spec.positionals.empty() ? "" : " " + spec.positionals);
}

// The usage line first, then the summary; CLI11 lists the options.
class Formatter : public CLI::Formatter {
 public:
  explicit Formatter(const VerbSpec& spec) : spec_(spec) { column_width(34); }
  std::string make_usage(const CLI::App*, std::string) const override {
    return "usage: " + usage_line(spec_) + "\n\n" + spec_.summary + "\n";
  }
  std::string make_description(const CLI::App*) const override { return ""; }

 private:
  const VerbSpec& spec_;
};

std::string described(const OptionSpec& o) {
  std::string d = o.help;
  if (o.kind == OptionKind::kRepeated) d += " (repeatable)";
  if (!o.default_text.empty()) d += " (default: " + o.default_text + ")";
  return d;
}

// The verb's CLI11 parser; `positional` receives the arguments that are not options.
std::unique_ptr<CLI::App> make_app(const VerbSpec& spec, std::vector<std::string>& positional) {
  auto app = std::make_unique<CLI::App>(spec.summary, "kiri " + spec.name);
  app->set_help_flag();  // -h/--help is a row of the table, handled before parsing
  app->allow_extras();   // unknown options come back in remaining(): we name them
  app->formatter(std::make_shared<Formatter>(spec));
  app->add_option("arguments", positional)->expected(0, -1)->group("");
  for (const OptionSpec& o : spec.options) {
    CLI::Option* opt =
        o.kind == OptionKind::kFlag ? app->add_flag(o.names) : app->add_option(o.names);
    opt->description(described(o));
    // Every occurrence is kept: "given twice" is checked below with kiri's message.
    if (o.kind != OptionKind::kFlag)
      opt->type_name(o.value_name)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  }
  return app;
}

std::vector<std::string> all_flags(const VerbSpec& spec) {
  std::vector<std::string> out;
  for (const OptionSpec& o : spec.options)
    for (const std::string& n : split_names(o.names)) out.push_back(n);
  return out;
}

[[noreturn]] void unknown_option(const VerbSpec& spec, const std::string& arg) {
  const std::string name = arg.substr(0, arg.find('='));
  const std::vector<std::string> known = all_flags(spec);
  if (auto best = closest(name, known))
    KIRI_RAISE(kConfig, "unknown option ", name, "; did you mean ", *best, "? (kiri ", spec.name,
               " --help lists the options)");
  std::string list;
  for (const std::string& k : known) list += " " + k;
  KIRI_RAISE(kConfig, "unknown option ", name, " (kiri ", spec.name, " takes:", list, ")");
}

// An option whose value names a file or folder (DIR, FILE, PATH, DS_CONFIG.json): an empty
// value names none, and would otherwise reach the filesystem as a bare "No such file".
bool names_a_path(const OptionSpec& o) {
  const std::string& v = o.value_name;
  return v.find("DIR") != std::string::npos || v.find("FILE") != std::string::npos ||
         v.find("PATH") != std::string::npos || v.ends_with(".json");
}

}  // namespace

std::string option_key(const OptionSpec& o) {
  const std::vector<std::string> names = split_names(o.names);
  for (const std::string& n : names)
    if (n.rfind("--", 0) == 0) return n.substr(2);
  return names.empty() ? std::string() : names.front().substr(1);
}

std::string option_flag(const OptionSpec& o) {
  const std::string key = option_key(o);
  return (o.names.find("--" + key) != std::string::npos ? "--" : "-") + key;
}

std::string help_text(const VerbSpec& spec) {
  std::vector<std::string> positional;
  return make_app(spec, positional)->help();
}

Args::Args(const std::vector<std::string>& argv, const VerbSpec& spec) {
  for (const std::string& a : argv) {
    if (a == "--") break;
    if (a == "-h" || a == "--help") throw HelpRequested(help_text(spec));
  }
  auto app = make_app(spec, positional_);
  try {
    // CLI11 takes the arguments in reverse order.
    app->parse(std::vector<std::string>(argv.rbegin(), argv.rend()));
  } catch (const CLI::ParseError& e) {
    KIRI_RAISE(kConfig, e.what(), " (kiri ", spec.name, " --help lists the options)");
  }
  for (const std::string& r : app->remaining())
    if (r != "--" && r.size() > 1 && r[0] == '-') unknown_option(spec, r);
  for (const OptionSpec& o : spec.options) {
    const std::string key = option_key(o);
    flag_of_[key] = option_flag(o);
    const CLI::Option* opt = app->get_option(split_names(o.names).front());
    if (opt->count() == 0) continue;
    if (o.kind == OptionKind::kFlag) {
      // CLI11 reads "--json=yes" as a flag's value; kiri's flags take none.
      for (const std::string& v : opt->results())
        KIRI_CHECK_KIND(kConfig, v == "true", option_flag(o), " takes no value, got '", v, "'");
      flags_.insert(key);
      continue;
    }
    KIRI_CHECK_KIND(kConfig, o.kind == OptionKind::kRepeated || opt->results().size() == 1,
                    option_flag(o), " given ", opt->results().size(), " times (once at most)");
    for (const std::string& v : opt->results()) {
      KIRI_CHECK_KIND(kConfig, !v.empty() || !names_a_path(o), option_flag(o),
                      " is empty: give the ", o.value_name, " it names");
      values_.emplace(key, v);
    }
  }
  const size_t n = positional_.size();
  KIRI_CHECK_KIND(kConfig, n >= spec.min_positionals && n <= spec.max_positionals, "kiri ",
                  spec.name, " takes ",
                  spec.min_positionals == spec.max_positionals
                      ? std::to_string(spec.max_positionals)
                      : str(spec.min_positionals, " to ", spec.max_positionals),
                  " argument(s), got ", n, n == 0 ? "" : " ('" + positional_.back() + "')",
                  " (usage: ", usage_line(spec), ")");
}

void Args::check_known(const std::string& name) const {
  KIRI_CHECK_KIND(kInternal, flag_of_.count(name) > 0, "option '", name,
                  "' is read but not declared in its verb's table (verbs.cpp)");
}

std::optional<std::string> Args::get(const std::string& name) const {
  check_known(name);
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  check_known(name);
  std::vector<std::string> out;
  for (auto [it, end] = values_.equal_range(name); it != end; ++it) out.push_back(it->second);
  return out;
}

bool Args::flag(const std::string& name) const {
  check_known(name);
  return flags_.count(name) > 0;
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
  KIRI_RAISE(kConfig, flag_of_.at(name), " must be an integer, got '", *v, "'");
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
  KIRI_RAISE(kConfig, flag_of_.at(name), " must be a number, got '", *v, "'");
}

DType parse_dtype(const std::string& s) {
  if (s == "fp32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "fp16" || s == "float16") return DType::kF16;
  KIRI_RAISE(kConfig, "--dtype must be fp32, bf16 or fp16, got '", quote_bounded(s, 80), "'");
}

}  // namespace kiri::cli
