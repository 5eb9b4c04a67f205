// The diagnosis texts on synthetic reports: cases the live tests cannot
// stage safely (rings that diverge happen only with check_collectives off).
#include "kiri/comm/diagnosis.h"

#include <gtest/gtest.h>

#include "kiri/comm/hang_error.h"

namespace kiri::comm::detail {
namespace {

GroupInfo group(int size) {
  GroupInfo g{"dp", 0, size, {}};
  for (int r = 0; r < size; ++r) g.world_ranks.push_back(2 * r + 1);
  return g;
}

Signature sig(OpKind kind, int64_t count) {
  return Signature{5,
                   count,
                   static_cast<int32_t>(kind),
                   static_cast<int32_t>(DType::kF32),
                   -1,
                   kind == OpKind::kAllReduce ? 0 : -1};
}

RankReport report(std::vector<OpRecord> ring, std::string activity = "waiting") {
  return RankReport{true, std::move(activity), std::move(ring)};
}

TEST(Diagnosis, MismatchWithoutMajorityUsesRankZerosSide) {
  std::vector<Signature> s = {sig(OpKind::kAllReduce, 4), sig(OpKind::kAllReduce, 4),
                              sig(OpKind::kAllGather, 4), sig(OpKind::kAllGather, 4)};
  const std::string m = mismatch_message(group(4), s);
  EXPECT_NE(m.find("first divergent rank: rank 2 (world 5)."), std::string::npos) << m;
  EXPECT_NE(m.find("(no majority)"), std::string::npos) << m;
  s[2] = s[3] = s[0];
  EXPECT_EQ(mismatch_message(group(4), s), "");
}

TEST(Diagnosis, NamesTheRankWhoseRingDivergedFirst) {
  const OpRecord ar{3, OpKind::kAllReduce, 400, -1, true}, bc{3, OpKind::kBroadcast, 400, 0, true};
  const OpRecord next{4, OpKind::kAllReduce, 400, -1, false};
  std::vector<RankReport> reports = {report({ar, next}), report({ar, next}), report({bc, next})};
  HangContext c{group(3), "all_reduce #4 (100 x F32, sum)", 4, 2.0, 0.5, ""};
  const std::string m = diagnose_hang(c, reports);
  EXPECT_NE(m.find("Likely cause: the recent operations diverge first at #3: rank 2 (world 5) "
                   "called #3 broadcast 400 B root 0 done; ranks 0, 1 called #3 all_reduce"),
            std::string::npos)
      << m;
}

TEST(Diagnosis, NamesMissingThenLateRanksAndListsEachRanksOps) {
  const OpRecord b{1, OpKind::kBarrier, 0, -1, true}, ar{2, OpKind::kAllReduce, 40, -1, false};
  std::vector<RankReport> reports = {report({b, ar}), report({b}, ""), RankReport{}};
  HangContext c{group(3), "all_reduce #2 (10 x F32, sum)", 2, 1.0, 0.3, ""};
  std::string m = diagnose_hang(c, reports);
  EXPECT_NE(m.find("Likely cause: rank 2 (world 5) is missing"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 (world 3): not inside any communication call"), std::string::npos) << m;
  EXPECT_NE(m.find("last ops: #1 barrier done, #2 all_reduce 40 B pending"), std::string::npos)
      << m;
  EXPECT_NE(m.find("no answer within 0.30 s"), std::string::npos) << m;
  reports[2] = report({b, ar});
  m = diagnose_hang(c, reports);
  EXPECT_NE(m.find("Likely cause: rank 1 (world 3) never reached all_reduce #2"), std::string::npos)
      << m;
}

// The error carries the world ranks that did not answer, for the layers that know hosts.
TEST(Diagnosis, TheHangErrorNamesTheWorldRanksThatDidNotAnswer) {
  const OpRecord ar{2, OpKind::kAllReduce, 40, -1, false};
  const std::vector<RankReport> reports = {RankReport{}, report({ar}), RankReport{}};
  const HangContext c{group(3), "all_reduce #2 (10 x F32, sum)", 2, 1.0, 0.3, ""};
  try {
    raise_hang(c, reports, __FILE__, __LINE__);
    FAIL() << "raise_hang returned";
  } catch (const HangError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCommTimeout);
    EXPECT_EQ(e.missing_world_ranks(), (std::vector<int>{1, 5}));  // ranks 0 and 2 of dp
    EXPECT_EQ(e.message(), diagnose_hang(c, reports));
  }
}

}  // namespace
}  // namespace kiri::comm::detail
