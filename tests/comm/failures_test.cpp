// Ranks that disagree, skip, arrive late or fail: named errors within seconds.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "bodies.h"
#include "harness.h"
#include "kiri/base/timer.h"
#include "kiri/comm/local/local.h"

namespace kiri::comm::testing {
namespace {

class Failures : public ::testing::TestWithParam<int> {};

TEST_P(Failures, ShapeMismatchNamesTheRanks) {
  KIRI_RUN_RANKS(GetParam(), shape_mismatch);
}
TEST_P(Failures, SkippedCollectiveNamesTheFirstDivergentRank) {
  KIRI_RUN_RANKS(GetParam(), skipped_collective);
}
TEST_P(Failures, LateRankTimesOutNamedThenCompletes) {
  KIRI_RUN_RANKS(GetParam(), late_rank_times_out);
}
TEST_P(Failures, RecvTimeoutNamesThePeerThenCompletes) {
  KIRI_RUN_RANKS(GetParam(), recv_timeout_names_the_peer);
}
TEST_P(Failures, RecvOfAnotherSizeIsAMismatch) {
  KIRI_RUN_RANKS(GetParam(), recv_size_mismatch);
}
// Groups across hosts start kiri's own transfers before their agreement completes
// (MpiWork::issued): a mismatch is still named, nothing hangs, and the group still works.
TEST_P(Failures, MismatchWhileKirisTransfersStartEarly) {
  KIRI_RUN_RANKS(GetParam(), shape_mismatch, pair_options(16));
  KIRI_RUN_RANKS(GetParam(), skipped_collective, pair_options(16));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Failures, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// One rank throws: the others, blocked with a long timeout, stop within
// milliseconds with kCommAborted naming it; run_local rethrows its error.
TEST(LocalBackend, OneRankThrowingAbortsTheOthersQuickly) {
  KIRI_LOCAL_ONLY();
  std::atomic<int> aborted{0};
  std::atomic<double> slowest{0};
  Options o = test_options();
  o.timeout = std::chrono::seconds(30);
  try {
    run_local(
        4,
        [&](Communicator& world) {
          Allocator a;
          Tensor t = make(100, DType::kF32, a);
          fill(t, [](int64_t) { return 1; });
          if (world.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            KIRI_RAISE(kInvalidArgument, "boom");
          }
          Timer timer;
          try {
            world.all_reduce(t, ReduceOp::kSum);
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::kCommAborted) << e.what();
            EXPECT_NE(e.message().find("world rank 1 failed"), std::string::npos) << e.what();
            EXPECT_NE(e.message().find("boom"), std::string::npos) << e.what();
            double s = timer.seconds();
            while (s > slowest && !slowest.compare_exchange_weak(s, s)) {
            }
            ++aborted;
          }
          // Later operations stop at once too.
          EXPECT_THROW(world.barrier(), Error);
        },
        o);
    FAIL() << "run_local did not rethrow";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(e.message(), "rank 1 of 4: boom");
  }
  EXPECT_EQ(aborted, 3);
  EXPECT_LT(slowest, 1.0);
}

TEST(LocalBackend, SplitWithNegativeColorJoinsNoGroup) {
  KIRI_LOCAL_ONLY();
  run_local(3, [](Communicator& world) {
    auto c = world.split(world.rank() == 1 ? -1 : 0, world.rank(), "some");
    if (world.rank() == 1) {
      EXPECT_EQ(c, nullptr);
      return;
    }
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->size(), 2);
    EXPECT_EQ(c->rank(), world.rank() == 0 ? 0 : 1);
    c->barrier();
  });
}

}  // namespace
}  // namespace kiri::comm::testing
