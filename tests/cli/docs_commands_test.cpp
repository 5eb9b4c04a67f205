// Every kiri command line shown in README.md and docs/*.md parses: each one is taken from
// the fenced code blocks (joining "\" continuations, dropping "$ " prompts, "# comments",
// environment assignments and what comes before "&&") and run with KIRI_PARSE_ONLY=1,
// which checks the options, the arguments and the --set keys of the verb (and, for kiri
// launch, of the command after "--") without running anything. A command shown as an error
// (a "# error" comment after it) must fail to parse instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

struct Command {
  std::string where;  // docs/planner.md:12
  std::vector<std::string> args;
  bool fails = false;  // shown as an error ("# error" after it): must not parse
};

// Shell words: '...' and "..." quoting, backslash escapes, an unquoted # starts a comment,
// and the operators ; | & (runs of them: "&&", "||") are words of their own.
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string w;
  bool in_word = false;
  char quote = 0;
  auto end_word = [&] {
    if (in_word) words.push_back(w);
    w.clear();
    in_word = false;
  };
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == quote)
        quote = 0;
      else if (c == '\\' && quote == '"' && i + 1 < line.size())
        w += line[++i];
      else
        w += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      w += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      end_word();
    } else if (c == ';' || c == '|' || c == '&') {
      end_word();
      std::string op(1, c);
      while (i + 1 < line.size() && line[i + 1] == c) op += line[++i];
      words.push_back(op);
    } else if (c == '#' && !in_word) {
      break;
    } else {
      w += c;
      in_word = true;
    }
  }
  end_word();
  return words;
}

bool is_kiri(const std::string& w) {
  return w == "kiri" || (w.size() > 5 && w.substr(w.size() - 5) == "/kiri");
}

// The kiri invocations of one shell line: each command between ";", "|", "&&" and "||" whose
// program (after NAME=value assignments) is kiri (build/kiri, ./kiri), or kiri as an argument
// of mpirun, srun, mpiexec, env or time; and whose first argument looks like a verb or a flag
// (program output such as "kiri all_reduce, check_collectives on" is not a command).
std::vector<std::vector<std::string>> kiri_invocations(const std::vector<std::string>& words) {
  static const std::regex verb_like("-{0,2}[a-z][a-z-]*");
  static const std::regex assignment("[A-Za-z_][A-Za-z0-9_]*=.*");
  static const std::set<std::string> runners = {"mpirun", "srun", "mpiexec", "env", "time"};
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> current;
  auto flush = [&] {
    size_t p = 0;
    while (p < current.size() && std::regex_match(current[p], assignment)) ++p;
    size_t k = p;
    if (p < current.size() && runners.count(current[p]))
      while (k < current.size() && !is_kiri(current[k])) ++k;
    if (k < current.size() && is_kiri(current[k])) {
      std::vector<std::string> args(current.begin() + k + 1, current.end());
      if (args.empty() || std::regex_match(args[0], verb_like)) out.push_back(args);
    }
    current.clear();
  };
  for (const std::string& w : words) {
    if (w.find_first_not_of(";|&") == std::string::npos)
      flush();
    else
      current.push_back(w);
  }
  flush();
  return out;
}

// The shell lines of one fenced block, "\" continuations joined, each with its line number.
// A block that shows a session ("$ " prompts) has commands only on its prompt lines; the
// rest is their output.
std::vector<std::pair<int, std::string>> block_commands(
    const std::vector<std::pair<int, std::string>>& lines) {
  bool session = false;
  for (const auto& [n, line] : lines) session = session || line.rfind("$ ", 0) == 0;
  std::vector<std::pair<int, std::string>> out;
  std::string joined;
  int first = 0;
  for (const auto& [n, line] : lines) {
    if (joined.empty()) first = n;
    const bool continued = !line.empty() && line.back() == '\\';
    joined += continued ? line.substr(0, line.size() - 1) : line;
    if (continued) continue;
    std::string text = std::move(joined);
    joined.clear();
    const bool prompt = text.rfind("$ ", 0) == 0;
    if (session && !prompt) continue;
    out.emplace_back(first, prompt ? text.substr(2) : text);
  }
  return out;
}

std::vector<Command> documented_commands() {
  const fs::path root = KIRI_SOURCE_DIR;
  std::vector<fs::path> files = {root / "README.md"};
  std::vector<fs::path> docs;
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") docs.push_back(e.path());
  std::sort(docs.begin(), docs.end());
  files.insert(files.end(), docs.begin(), docs.end());
  std::vector<Command> out;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    bool fenced = false;
    std::vector<std::pair<int, std::string>> block;
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (line.find_first_not_of(' ') != std::string::npos &&
          line.compare(line.find_first_not_of(' '), 3, "```") == 0) {
        if (fenced) {
          for (const auto& [first, text] : block_commands(block)) {
            const std::string where =
                fs::relative(file, root).string() + ":" + std::to_string(first);
            const bool fails = text.find("# error") != std::string::npos;
            for (auto& args : kiri_invocations(shell_words(text)))
              out.push_back({where, args, fails});
          }
        }
        fenced = !fenced;
        block.clear();
        continue;
      }
      if (fenced) block.emplace_back(number, line);
    }
  }
  return out;
}

std::string quoted(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += (s.empty() ? "" : " ") + q + "'";
  }
  return s;
}

TEST(DocsCommands, ShellWordsAndInvocations) {
  EXPECT_EQ(shell_words("a \"b c\" 'd e' f\\ g # comment"),
            (std::vector<std::string>{"a", "b c", "d e", "f g"}));
  auto calls = kiri_invocations(shell_words(
      "cd /tmp && OMP_NUM_THREADS=1 build/kiri bench --ddp; mpirun -n 8 build/kiri train x"));
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{"bench", "--ddp"}));
  EXPECT_EQ(calls[1], (std::vector<std::string>{"train", "x"}));
  EXPECT_TRUE(
      kiri_invocations(shell_words("kiri all_reduce, check_collectives on 3.1 us")).empty());
}

TEST(DocsCommands, EveryShownCommandParses) {
  const std::vector<Command> commands = documented_commands();
  // README's "Using it" alone shows more than 15; fewer means the extraction broke.
  ASSERT_GE(commands.size(), 30u);
  bool saw_readme_launch = false;
  for (const Command& c : commands) {
    saw_readme_launch |=
        c.where.rfind("README.md", 0) == 0 && !c.args.empty() && c.args[0] == "launch";
    const kiri::testing::Result r = kiri::testing::run_kiri(quoted(c.args), "KIRI_PARSE_ONLY=1");
    EXPECT_EQ(r.code, c.fails ? 2 : 0) << c.where << ": kiri " << quoted(c.args) << "\n"
                                       << r.output;
  }
  EXPECT_TRUE(saw_readme_launch);
}

}  // namespace
