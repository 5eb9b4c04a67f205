// Every Markdown table in README.md and docs/*.md has the same number of cells in each row
// as in its header: an unescaped '|' inside a cell ("one of: a | b") splits it and breaks
// the table when rendered.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;

// The cell separators of a table row: '|' not escaped by a backslash.
int separators(const std::string& row) {
  int n = 0;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] == '|' && (i == 0 || row[i - 1] != '\\')) ++n;
  return n;
}

std::vector<fs::path> markdown_files() {
  const fs::path root = KIRI_SOURCE_DIR;
  std::vector<fs::path> files{root / "README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") files.push_back(e.path());
  return files;
}

TEST(DocsTables, EveryRowHasTheHeadersCells) {
  int tables = 0;
  for (const fs::path& file : markdown_files()) {
    std::ifstream in(file);
    ASSERT_TRUE(in.good()) << file;
    std::string line;
    int header = -1, number = 0;
    bool fenced = false;
    while (std::getline(in, line)) {
      ++number;
      if (line.rfind("```", 0) == 0) fenced = !fenced;
      if (fenced || line.rfind("|", 0) != 0) {
        header = -1;  // a table ends at its first line that is not a row
        continue;
      }
      if (header < 0) {
        header = separators(line);
        ++tables;
        continue;
      }
      EXPECT_EQ(separators(line), header)
          << file.filename().string() << ":" << number << " has " << separators(line) - 1
          << " cells, its table's header " << header - 1
          << " (escape a '|' in a cell as \\|): " << line.substr(0, 120);
    }
  }
  EXPECT_GT(tables, 10) << "found too few tables: is KIRI_SOURCE_DIR right?";
}

}  // namespace
