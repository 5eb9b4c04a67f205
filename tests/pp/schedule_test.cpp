#include "kiri/parallel/pp/schedule.h"

#include <gtest/gtest.h>

#include <functional>

#include "kiri/base/error.h"

namespace kiri::parallel::pp {
namespace {

using Op = Action::Op;

void expect_config_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "accepted; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

std::string table_str(const std::vector<Action>& t) {
  std::string s;
  for (const Action& a : t) s += (s.empty() ? "" : " ") + action_str(a);
  return s;
}

TEST(PpSchedule, ParsesTheThreeNames) {
  EXPECT_EQ(parse_schedule("gpipe"), PipelineSchedule::kGpipe);
  EXPECT_EQ(parse_schedule("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(parse_schedule("interleaved"), PipelineSchedule::kInterleaved);
  for (PipelineSchedule k :
       {PipelineSchedule::kGpipe, PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved})
    EXPECT_EQ(parse_schedule(name(k)), k);
  expect_config_error([] { parse_schedule("1F1B-x"); },
                      "parallel.schedule = \"1F1B-x\" is not a pipeline schedule; allowed: "
                      "gpipe, 1f1b, interleaved");
}

// The tables themselves, small enough to read.
TEST(PpSchedule, GoldenTables) {
  const auto g = make_schedule(PipelineSchedule::kGpipe, 2, 3, 1);
  EXPECT_EQ(table_str(g[0]), "F0.0 F1.0 F2.0 B2.0 B1.0 B0.0");
  EXPECT_EQ(table_str(g[1]), table_str(g[0]));
  const auto s = make_schedule(PipelineSchedule::k1F1B, 3, 4, 1);
  EXPECT_EQ(table_str(s[0]), "F0.0 F1.0 F2.0 B0.0 F3.0 B1.0 B2.0 B3.0");
  EXPECT_EQ(table_str(s[1]), "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 B3.0");
  EXPECT_EQ(table_str(s[2]), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0");
  // Interleaved, p 2, v 2, m 4: micro-batches go through each chunk in groups of p = 2.
  const auto i = make_schedule(PipelineSchedule::kInterleaved, 2, 4, 2);
  EXPECT_EQ(table_str(i[0]),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 "
            "B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(table_str(i[1]),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 "
            "F3.1 B3.1 B2.0 B3.0");
}

// 1F1B never has more than p - rank forwards ahead of its backwards; GPipe has m.
TEST(PpSchedule, OneFOneBBoundsInFlightByStageCount) {
  for (int p : {1, 2, 4})
    for (int m : {1, 2, 4, 8}) {
      const auto t = make_schedule(PipelineSchedule::k1F1B, p, m, 1);
      for (int r = 0; r < p; ++r) {
        int held = 0, peak = 0;
        for (const Action& a : t[r]) peak = std::max(peak, held += a.op == Op::kForward ? 1 : -1);
        EXPECT_EQ(peak, std::min(p - r, m)) << "p " << p << " m " << m << " rank " << r;
      }
    }
}

TEST(PpSchedule, BadConfigsNameTheRule) {
  using K = PipelineSchedule;
  expect_config_error([] { validate_pipeline(K::k1F1B, 4, 8, 8, 1); },
                      "parallel.pp = 8 exceeds model.n_layer = 4: every stage needs a layer");
  expect_config_error([] { validate_pipeline(K::k1F1B, 4, 2, 0, 1); },
                      "parallel.microbatches = 0 must be >= 1");
  expect_config_error([] { validate_pipeline(K::kGpipe, 4, 0, 4, 1); },
                      "parallel.dp = 1, parallel.tp = 1 and parallel.pp = 0 must each be >= 1");
  expect_config_error([] { validate_pipeline(K::kInterleaved, 12, 4, 6, 2); },
                      "interleaved 1F1B needs parallel.microbatches (m) to be a multiple of "
                      "parallel.pp (p): m = 6, p = 4");
  expect_config_error([] { validate_pipeline(K::kInterleaved, 6, 4, 8, 2); },
                      "interleaved 1F1B needs model.n_layer (L) >= parallel.pp (p) x "
                      "parallel.virtual_stages (v), so every chunk has a layer: L = 6, p = 4, "
                      "v = 2");
  expect_config_error([] { validate_pipeline(K::kInterleaved, 12, 4, 8, 1); },
                      "interleaved 1F1B needs parallel.virtual_stages >= 2, got 1");
  expect_config_error([] { validate_pipeline(K::k1F1B, 12, 4, 8, 2); },
                      "parallel.virtual_stages = 2 needs schedule interleaved; 1f1b runs exactly "
                      "1 chunk per rank");
  // make_schedule applies the same rules (all but the layer count).
  expect_config_error([] { make_schedule(K::kInterleaved, 4, 6, 2); },
                      "multiple of parallel.pp (p): m = 6, p = 4");
  EXPECT_NO_THROW(validate_pipeline(K::kInterleaved, 8, 4, 8, 2));
  EXPECT_NO_THROW(validate_pipeline(K::kGpipe, 1, 1, 1, 1));
}

}  // namespace
}  // namespace kiri::parallel::pp
