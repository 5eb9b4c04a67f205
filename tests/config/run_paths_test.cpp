// log.trace lies in the run folder: `true` names {run.dir}/trace.json, a relative path is
// taken inside run.dir, an absolute one as given; resolving twice changes nothing.
#include <gtest/gtest.h>

#include <string>

#include "kiri/base/error.h"
#include "kiri/config/config_schema.h"
#include "kiri/config/run_config.h"

namespace kiri {
namespace {

std::string trace_of(const std::string& set, const std::string& run_dir = "runs/{run.name}") {
  RunConfig c = default_run_config();
  c.run.name = "a";
  c.run.dir = run_dir;
  apply_set(c, "log.trace=" + set);
  const RunConfig once = resolve_run_paths(c);
  EXPECT_EQ(resolve_run_paths(once).log.trace, once.log.trace) << set;  // idempotent
  return once.log.trace;
}

TEST(RunPaths, TraceTrueIsTheRunFoldersTraceJson) {
  EXPECT_EQ(trace_of("true"), "runs/a/trace.json");
  EXPECT_EQ(trace_of("false"), "");
  EXPECT_EQ(trace_of(""), "");
}

TEST(RunPaths, ARelativeTraceLiesInTheRunFolder) {
  EXPECT_EQ(trace_of("trace.json"), "runs/a/trace.json");
  EXPECT_EQ(trace_of("traces/t.json"), "runs/a/traces/t.json");
  // The case: it used to land in runs/, outside the run folder.
  EXPECT_EQ(trace_of("runs/trace.json"), "runs/a/runs/trace.json");
  // Already inside run.dir (as written before this rule, or as config.json stores it): kept.
  EXPECT_EQ(trace_of("runs/a/trace.json"), "runs/a/trace.json");
  EXPECT_EQ(trace_of("{run.dir}/t.json"), "runs/a/t.json");
  EXPECT_EQ(trace_of("t.json", "/abs/run"), "/abs/run/t.json");
}

TEST(RunPaths, AnAbsoluteTraceIsTakenAsGiven) {
  EXPECT_EQ(trace_of("/tmp/x/trace.json"), "/tmp/x/trace.json");
}

TEST(RunPaths, CsvAndTensorboardAreBooleans) {
  RunConfig c = default_run_config();
  EXPECT_FALSE(c.log.csv);
  EXPECT_FALSE(c.log.tensorboard);
  apply_set(c, "log.csv=true");
  apply_set(c, "log.tensorboard=1");
  EXPECT_TRUE(c.log.csv);
  EXPECT_TRUE(c.log.tensorboard);
  try {
    apply_set(c, "log.csv=yes");
    ADD_FAILURE() << "log.csv=yes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("log.csv must be true or false, got"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiri
