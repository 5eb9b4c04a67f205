// log.trace on one process: the file, its spans, and the per-rank naming.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kiri/train/trainer.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

TEST(TracePath, OneFilePerRankWithSeveralRanks) {
  EXPECT_EQ(trace_path_for_rank("runs/trace.json", 0, 1), "runs/trace.json");
  EXPECT_EQ(trace_path_for_rank("runs/trace.json", 3, 4), "runs/trace.rank3.json");
  EXPECT_EQ(trace_path_for_rank("trace", 1, 2), "trace.rank1");
  EXPECT_EQ(trace_path_for_rank("a.b/trace.json", 0, 2), "a.b/trace.rank0.json");
}

TEST(TrainerTrace, OneProcessTraceHasForwardBackwardOptimizerAndEvaluation) {
  const fs::path dir =
      fs::temp_directory_path() / ("kiri_trace_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  RunConfig c = byte_test_config(1, 2, 32, 2);
  c.train.steps = 2;
  c.train.eval_batches = 1;
  c.log.trace = (dir / "sub" / "trace.json").string();
  {
    Trainer t(c);
    t.run();
  }
  std::ifstream in(c.log.trace);
  ASSERT_TRUE(in) << c.log.trace;
  std::stringstream s;
  s << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(s.str());
  std::multiset<std::string> names;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") names.insert(e["name"].get<std::string>());
  EXPECT_EQ(names.count("forward"), 2u);
  EXPECT_EQ(names.count("backward"), 2u);
  EXPECT_EQ(names.count("optimizer"), 2u);
  EXPECT_EQ(names.count("step 1"), 1u);
  EXPECT_EQ(names.count("evaluate"), 1u);
  EXPECT_GE(names.count("eval forward"), 1u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::train
