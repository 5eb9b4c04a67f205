// `kiri [--verbose] VERB ARGS...`: the global flags, the verbs' help, the parse-only mode and
// the one place where an error becomes a message and an exit code.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "kiri/base/suggest.h"
#include "kiri/cli/args.h"
#include "kiri/cli/commands.h"
#include "kiri/cli/report.h"
#include "kiri/cli/verbs.h"
#include "kiri/cli/version.h"
#include "kiri/config/config_schema.h"
#include "kiri/launch/status.h"
#include "kiri/launch/world.h"

namespace kiri::cli {

namespace {

// The flags that may come before the verb.
const std::vector<std::string> kGlobalFlags = {"--verbose", "--version", "-h", "--help"};

std::string overview() {
  std::string s =
      "kiri: train GPT-style transformers, cut five ways.\n\n"
      "usage: kiri [--verbose] VERB [ARGS...]\n"
      "       kiri --version | --help | help [VERB]\n\nverbs:\n";
  for (const VerbSpec& v : verb_specs()) {
    std::string name = "  " + v.name;
    name.resize(10, ' ');
    s += name + v.summary + "\n";
  }
  return s +
         "\nkiri VERB --help lists a verb's options; --verbose (before or after the verb) adds\n"
         "the source location to errors. CONFIG is a JSON file; its keys are documented in\n"
         "docs/config.md (kiri config --markdown). More in docs/cli.md.\n";
}

// KIRI_PARSE_ONLY=1: check the command line (options, arguments, --set keys and values)
// without running anything; `launch` checks its own options and the command after "--".
int parse_only(const std::vector<std::string>& argv);

int parse_verb_only(const VerbSpec& spec, const std::vector<std::string>& rest) {
  if (spec.name == "launch") {
    launch_argv(rest);  // checks -n and the other launch options, builds mpirun's command
    auto dashes = std::find(rest.begin(), rest.end(), "--");
    return parse_only(std::vector<std::string>(dashes + 1, rest.end()));
  }
  Args a(rest, spec);
  if (spec.name == "train" || spec.name == "config") {
    kiri::RunConfig cfg = load_config("", a.all("set"));  // the keys and their values
    if (auto m = a.get("mem-limit")) apply_key(cfg, "train.mem_limit", *m);
  }
  if (spec.name == "help" && !a.positional().empty()) verb_spec(a.positional()[0]);
  std::printf("kiri %s: the command line parses\n", spec.name.c_str());
  return 0;
}

// Splits off the global flags before the verb; returns the verb's index in argv.
size_t global_flags(const std::vector<std::string>& argv) {
  size_t i = 0;
  for (; i < argv.size() && argv[i].size() > 1 && argv[i][0] == '-'; ++i) {
    const std::string& a = argv[i];
    if (a == "--verbose" || a == "--version" || a == "-h" || a == "--help") continue;
    if (auto best = closest(a, kGlobalFlags))
      KIRI_RAISE(kConfig, "unknown option ", a, "; did you mean ", *best, "?");
    KIRI_RAISE(kConfig, "unknown option ", a,
               " before the verb (kiri takes --verbose, --version, --help there)");
  }
  return i;
}

int parse_only(const std::vector<std::string>& argv) {
  const size_t v = global_flags(argv);
  KIRI_CHECK_KIND(kConfig, v < argv.size(), "no verb given (kiri --help lists them)");
  const VerbSpec& spec = verb_spec(argv[v]);
  return parse_verb_only(spec, std::vector<std::string>(argv.begin() + v + 1, argv.end()));
}

int run_verb(const std::string& verb, const std::vector<std::string>& rest) {
  if (verb == "train") return cmd_train(rest);
  if (verb == "config") return cmd_config(rest);
  if (verb == "sample") return cmd_sample(rest);
  if (verb == "eval") return cmd_eval(rest);
  if (verb == "data") return cmd_data(rest);
  if (verb == "bench") return cmd_bench(rest);
  if (verb == "launch") return cmd_launch(rest);
  if (verb == "plan") return cmd_plan(rest);
  if (verb == "export") return cmd_export(rest);
  Args a(rest, verb_spec("help"));  // kiri help [VERB]
  std::cout << (a.positional().empty() ? overview() : help_text(verb_spec(a.positional()[0])));
  return 0;
}

int run(const std::vector<std::string>& argv) {
  const size_t v = global_flags(argv);
  for (size_t i = 0; i < v; ++i) {
    if (argv[i] == "--version") {
      std::printf("kiri %s\n", version());
      return 0;
    }
    if (argv[i] == "-h" || argv[i] == "--help") {
      std::cout << overview();
      return 0;
    }
  }
  if (v == argv.size()) {
    std::cerr << overview();
    return 2;
  }
  const VerbSpec& spec = verb_spec(argv[v]);
  const std::vector<std::string> rest(argv.begin() + v + 1, argv.end());
  if (const char* p = std::getenv("KIRI_PARSE_ONLY"); p && std::string(p) == "1")
    return parse_verb_only(spec, rest);
  return run_verb(spec.name, rest);
}

}  // namespace

int run_cli(const std::vector<std::string>& argv) {
  // --verbose anywhere before "--" (after "--" it is the launched command's).
  set_verbose(false);
  for (const std::string& a : argv) {
    if (a == "--") break;
    if (a == "--verbose") set_verbose(true);
  }
  launch::start_launch_status();  // a rank of kiri launch --max-restarts: its records
                                  // (launch/status.h)
  try {
    const int code = run(argv);
    launch::record_launch_exit(code);
    return code;
  } catch (const HelpRequested& h) {
    if (launch::job_rank() <= 0)
      std::cout << h.what();  // once per job (kiri launch -- train --help)
    launch::record_launch_exit(0);
    return 0;
  } catch (const Error& e) {
    return report_error(e);
  } catch (const std::exception& e) {
    return report_unexpected(e);
  }
}

}  // namespace kiri::cli
