// run_agreed: a failure on some ranks makes every rank raise the lowest failing rank's
// error; no failure, no error. On threads and under mpirun.
#include <gtest/gtest.h>

#include "harness.h"
#include "kiri/comm/agree.h"

namespace kiri::comm::testing {
namespace {

class Agree : public ::testing::TestWithParam<int> {};

// Ranks in `failing` raise kData "bad file on rank R"; every rank must see rank `first`'s.
void expect_agreed(Communicator& c, const std::vector<int>& failing, int first) {
  const bool fails = std::find(failing.begin(), failing.end(), c.rank()) != failing.end();
  try {
    run_agreed(c, [&] {
      if (fails) KIRI_RAISE(kData, "bad file on rank ", c.rank());
    });
    ADD_FAILURE() << "rank " << c.rank() << ": no error";
  } catch (const AgreedError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_EQ(e.message(), "bad file on rank " + std::to_string(first));
    EXPECT_EQ(e.failed_rank(), first);
    EXPECT_EQ(e.failures(), static_cast<int>(failing.size()));
    EXPECT_NE(e.where().find("agree_test.cpp:"), std::string::npos) << e.where();
  }
}

TEST_P(Agree, EveryRankRaisesTheLowestFailingRanksError) {
  const int n = GetParam();
  KIRI_RUN_RANKS(n, [&](Communicator& c) {
    expect_agreed(c, {n - 1}, n - 1);
    expect_agreed(c, {0, n - 1}, 0);
    // Then the group goes on: nothing failed, nothing raised, and a collective still matches.
    EXPECT_NO_THROW(run_agreed(c, [] {}));
    c.barrier();
  });
}

TEST_P(Agree, AnExceptionThatIsNotAKiriErrorIsInternal) {
  KIRI_RUN_RANKS(GetParam(), [](Communicator& c) {
    try {
      run_agreed(c, [&] {
        if (c.rank() == 0) throw std::runtime_error("boom");
      });
      ADD_FAILURE() << "no error";
    } catch (const AgreedError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal);
      EXPECT_EQ(e.message(), "unexpected error: boom");
      EXPECT_EQ(e.failed_rank(), 0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Agree, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace kiri::comm::testing
