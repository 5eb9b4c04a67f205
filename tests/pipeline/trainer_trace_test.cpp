// log.trace with pipeline parallelism: one trace file per rank with the
// pipeline's forward and backward spans, the optimizer and the pp
// communication, and the measured bubble in the step metrics.
#include <gtest/gtest.h>

#include <omp.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/harness.h"
#include "kiri/train/trainer.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TrainerTrace, PipelineWritesOneFilePerRankAndTheBubble) {
  KIRI_RUN_RANKS(2, [](comm::Communicator& world) {
    omp_set_num_threads(1);
    const std::string dir = shared_temp_dir(world, "trainer_trace");
    RunConfig c = byte_test_config(2, 2, 32, 2);
    c.train.steps = 2;
    c.train.eval_batches = 1;
    c.parallel.pp = 2;
    c.parallel.microbatches = 4;
    c.parallel.schedule = kiri::PipelineSchedule::kGpipe;
    c.log.metrics = dir + "/metrics.jsonl";
    c.log.trace = dir + "/trace.json";
    {
      Trainer t(c, world);
      ASSERT_NE(t.tracer(), nullptr);
      t.run();
    }
    world.barrier();
    const std::string path = trace_path_for_rank(c.log.trace, world.rank(), 2);
    EXPECT_EQ(path, dir + "/trace.rank" + std::to_string(world.rank()) + ".json");
    ASSERT_TRUE(fs::exists(path)) << path;
    const nlohmann::json j = nlohmann::json::parse(read_text(path));
    std::set<std::string> names, groups;
    for (const auto& e : j["traceEvents"]) {
      if (e["ph"] != "X") continue;
      EXPECT_EQ(e["pid"], world.rank());
      names.insert(e["name"].get<std::string>());
      if (e.contains("args") && e["args"].contains("group"))
        groups.insert(e["args"]["group"].get<std::string>());
    }
    for (const char* n : {"forward m0 c0", "forward m3 c0", "backward m3 c0", "optimizer", "step 1",
                          "step 2", "evaluate", "send", "recv"})
      EXPECT_TRUE(names.count(n)) << n << " missing on rank " << world.rank();
    EXPECT_TRUE(groups.count("pp"));
    if (world.rank() == 0) {
      std::istringstream lines(read_text(c.log.metrics));
      std::string line;
      int n = 0;
      while (std::getline(lines, line)) {
        const nlohmann::json m = nlohmann::json::parse(line);
        ASSERT_TRUE(m.contains("bubble")) << line;
        EXPECT_GT(m["bubble"].get<double>(), 0.0);
        EXPECT_LT(m["bubble"].get<double>(), 1.0);
        ++n;
      }
      EXPECT_EQ(n, 2);
    }
    world.barrier();
    if (world.rank() == 0) fs::remove_all(dir);
  });
}

}  // namespace
}  // namespace kiri::train
