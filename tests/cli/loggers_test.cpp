// log.csv and log.tensorboard on a real run, read back: metrics.csv and the TensorBoard
// events (read by the `tensorboard` package's own EventAccumulator, from PyPI in the test
// venv; skipped naming the reason when scripts/test-venv.sh cannot make it) hold the same
// values as metrics.jsonl, through a resume; and log.trace's relative path lands in the run
// folder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "cli/test_venv.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using kiri::testing::Result;
using kiri::testing::run_kiri;
using kiri::testing::run_shell;
using nlohmann::json;

const char* kModel =
    " --set data.tokenizer=byte --set model.n_layer=1 --set model.n_embd=32"
    " --set model.block_size=32 --set train.seq_len=32 --set train.micro_batch=2"
    " --set train.warmup=1 --set train.eval_every=2 --set train.eval_batches=1"
    " --set checkpoint.every=2 --set log.csv=true --set log.tensorboard=true";

// metrics.jsonl's value for a scalar_row name ("mem/parameters", "comm/bytes_sent", ...);
// nullopt where the row has none.
std::optional<double> jsonl_value(const json& row, const std::string& name) {
  if (name.starts_with("mem/")) return row["mem"][name.substr(4)].get<double>();
  if (name.starts_with("comm/")) {
    double sum = 0;
    if (row.contains("comm"))
      for (const json& s : row["comm"]) sum += s[name.substr(5)].get<double>();
    return sum;
  }
  if (!row.contains(name)) return std::nullopt;
  return row[name].get<double>();
}

std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    out.push_back(cells);
  }
  return out;
}

// Trains steps 1..4, then resumes to 6 (a second event file, the CSV appended).
std::string train_and_resume(const std::string& name) {
  const std::string dir = kiri::testing::temp_dir(name) + "/run";
  Result r = run_kiri("train" + std::string(kModel) + " --set train.steps=4 --set run.dir=" + dir +
                      " --set log.trace=trace.json");
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_kiri("train" + std::string(kModel) + " --set train.steps=6 --set run.dir=" + dir +
               " --resume auto");
  EXPECT_EQ(r.code, 0) << r.output;
  return dir;
}

TEST(Loggers, CsvHoldsMetricsJsonlsValuesAndTheTraceIsInTheRunFolder) {
  const std::string dir = train_and_resume("csv");
  EXPECT_TRUE(fs::exists(dir + "/trace.json"));  // log.trace=trace.json: inside run.dir
  const std::vector<json> rows = read_jsonl(dir + "/metrics.jsonl");
  const auto csv = read_csv(dir + "/metrics.csv");
  ASSERT_EQ(rows.size(), 6u);
  ASSERT_EQ(csv.size(), 7u);  // the header once, then a row per step
  const std::vector<std::string>& header = csv[0];
  ASSERT_EQ(header.size(), 16u);
  EXPECT_EQ(header[0], "step");
  int compared = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(csv[i + 1].size(), header.size()) << "row " << i + 1;
    EXPECT_EQ(std::stoll(csv[i + 1][0]), rows[i]["step"].get<int64_t>());
    for (size_t c = 1; c < header.size(); ++c) {
      const std::optional<double> want = jsonl_value(rows[i], header[c]);
      const std::string& cell = csv[i + 1][c];
      if (!want) {
        EXPECT_EQ(cell, "") << header[c] << " at step " << i + 1;
        continue;
      }
      EXPECT_EQ(std::strtod(cell.c_str(), nullptr), *want) << header[c] << " at step " << i + 1;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 14 + 3);  // val_loss at steps 2, 4 and 6
}

TEST(Loggers, TensorBoardReadsMetricsJsonlsValues) {
  std::string why;
  const std::string py = kiri::testing::venv_python(&why);
  if (py.empty()) GTEST_SKIP() << "no tensorboard package: " << why;
  const std::string dir = train_and_resume("tb");
  const Result r = run_shell(py + " " + KIRI_SOURCE_DIR + "/tests/cli/tensorboard_read.py " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  const json got = json::parse(r.output.substr(r.output.rfind("{\"files\"")));
  EXPECT_EQ(got["files"].get<int>(), 2);  // one per start
  const std::vector<json> rows = read_jsonl(dir + "/metrics.jsonl");
  ASSERT_EQ(rows.size(), 6u);
  const json& scalars = got["scalars"];
  EXPECT_EQ(scalars.size(), 15u) << scalars.dump();
  int compared = 0;
  for (const auto& [tag, points] : scalars.items()) {
    std::vector<int64_t> want_steps;
    for (const json& row : rows)
      if (jsonl_value(row, tag)) want_steps.push_back(row["step"].get<int64_t>());
    ASSERT_EQ(points.size(), want_steps.size()) << tag;
    for (size_t i = 0; i < points.size(); ++i) {
      const int64_t step = points[i][0].get<int64_t>();
      EXPECT_EQ(step, want_steps[i]) << tag;
      // TensorBoard keeps simple_value as float32: the jsonl double rounded to float.
      const float want = static_cast<float>(*jsonl_value(rows[step - 1], tag));
      EXPECT_EQ(static_cast<float>(points[i][1].get<double>()), want) << tag << " at " << step;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 6 * 14 + 3);
  EXPECT_TRUE(scalars.contains("loss") && scalars.contains("mem/parameters") &&
              scalars.contains("comm/bytes_sent"));
}

}  // namespace
