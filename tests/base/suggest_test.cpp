// The edit distance behind "did you mean ...?" and the closeness rule it applies.
#include "kiri/base/suggest.h"

#include <gtest/gtest.h>

namespace {

using kiri::closest;
using kiri::edit_distance;

TEST(Suggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("train.lr", "train.lr"), 0u);
  EXPECT_EQ(edit_distance("train.lrr", "train.lr"), 1u);     // one insertion
  EXPECT_EQ(edit_distance("mem-limt", "mem-limit"), 1u);     // one deletion
  EXPECT_EQ(edit_distance("top-j", "top-k"), 1u);            // one substitution
  EXPECT_EQ(edit_distance("zero-stgae", "zero-stage"), 1u);  // one swap of neighbours
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("abc", "cba"), 2u);
}

TEST(Suggest, ClosestAllowsMoreEditsForLongerWords) {
  const std::vector<std::string> options = {"--set", "--resume", "--mem-limit", "--auto"};
  EXPECT_EQ(closest("--mem-limt", options), "--mem-limit");
  EXPECT_EQ(closest("--resum", options), "--resume");
  EXPECT_EQ(closest("--memlimt", options), "--mem-limit");  // 2 edits, 9 characters
  EXPECT_EQ(closest("--frobnicate", options), std::nullopt);
  // Up to 5 characters one edit: "--st" is 1 from "--set", "-st" is 2.
  EXPECT_EQ(closest("--st", options), "--set");
  EXPECT_EQ(closest("-st", options), std::nullopt);
  // Not shorter than the distance: "x" is 1 edit from "n" but no typo of it.
  EXPECT_EQ(closest("x", {"n"}), std::nullopt);
  EXPECT_EQ(closest("anything", {}), std::nullopt);
}

TEST(Suggest, TiesGoToTheEarlierCandidate) {
  EXPECT_EQ(closest("--dq", {"--dp", "--tp", "--pp"}), "--dp");
  EXPECT_EQ(closest("--xp", {"--dp", "--tp", "--pp"}), "--dp");
  EXPECT_EQ(closest("--xp", {"--tp", "--dp"}), "--tp");
}

}  // namespace
