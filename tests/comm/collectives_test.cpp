// Every collective, as threads here and under mpirun (kiri_comm_tests_mpi2/4).
#include <gtest/gtest.h>

#include "bodies.h"
#include "harness.h"

namespace kiri::comm::testing {
namespace {

TEST(ChunkRange, SplitsUnevenTotalsFirstRanksFirst) {
  EXPECT_EQ(chunk_range(10, 4, 0).begin, 0);
  EXPECT_EQ(chunk_range(10, 4, 0).size(), 3);
  EXPECT_EQ(chunk_range(10, 4, 1).begin, 3);
  EXPECT_EQ(chunk_range(10, 4, 2).size(), 2);
  EXPECT_EQ(chunk_range(10, 4, 3).end, 10);
  EXPECT_EQ(chunk_range(0, 4, 3).size(), 0);
  EXPECT_EQ(chunk_range(1, 4, 0).size(), 1);
  EXPECT_EQ(chunk_range(1, 4, 1).size(), 0);
  EXPECT_THROW(chunk_range(5, 2, 2), Error);
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, SmallSizesAllDtypesAllGroups) {
  KIRI_RUN_RANKS(GetParam(), collectives_small);
}
TEST_P(Collectives, LargeF32AllGroups) {
  KIRI_RUN_RANKS(GetParam(), [](Communicator& w) { collectives_large(w, DType::kF32); });
}
TEST_P(Collectives, LargeBF16AllGroups) {
  KIRI_RUN_RANKS(GetParam(), [](Communicator& w) { collectives_large(w, DType::kBF16); });
}
TEST_P(Collectives, LargeF16AllGroups) {
  KIRI_RUN_RANKS(GetParam(), [](Communicator& w) { collectives_large(w, DType::kF16); });
}
TEST_P(Collectives, F16ValuesBeyondBF16AndOverflowToInf) {
  KIRI_RUN_RANKS(GetParam(), f16_beyond_bf16);
}
TEST_P(Collectives, LargeF64AllGroups) {
  KIRI_RUN_RANKS(GetParam(), [](Communicator& w) { collectives_large(w, DType::kF64); });
}
TEST_P(Collectives, AsyncStartedTogetherWaitedInReverse) {
  KIRI_RUN_RANKS(GetParam(), async_out_of_order);
}
TEST_P(Collectives, WaitingOnOneCommunicatorAdvancesTheOthers) {
  KIRI_RUN_RANKS(GetParam(), progress_across_communicators);
}
TEST_P(Collectives, StatsCountTheAlgorithmsBytes) {
  KIRI_RUN_RANKS(GetParam(), stats_after_known_sequence);
}
TEST_P(Collectives, RingKeepsTheLast64Ops) {
  KIRI_RUN_RANKS(GetParam(), ring_keeps_last_64);
}

// Pieces of 4 KiB (many messages per step) and of 1 GiB (one per step).
class Ring : public ::testing::TestWithParam<int> {};

TEST_P(Ring, AllSizesDtypesOpsGroupsInSmallPieces) {
  KIRI_RUN_RANKS(GetParam(), ring_all_reduce_sizes, ring_options(4096));
}
TEST_P(Ring, AllSizesDtypesOpsGroupsInOnePiece) {
  KIRI_RUN_RANKS(GetParam(), ring_all_reduce_sizes, ring_options(int64_t{1} << 30));
}
TEST_P(Ring, BitwiseTheSameOnEveryRank) {
  KIRI_RUN_RANKS(GetParam(), ring_bitwise_same_everywhere, ring_options(4096));
}
TEST_P(Ring, ManyInFlightWaitedInReverse) {
  KIRI_RUN_RANKS(GetParam(), ring_many_in_flight, ring_options(512));
}
TEST_P(Ring, GroupsAcrossHostsTakeKirisTransfers) {
  KIRI_RUN_RANKS(GetParam(), pair_collectives, pair_options(512));
}
TEST_P(Ring, TheTransfersScratchCountsAsTheRanksBuffers) {
  KIRI_RUN_RANKS(GetParam(), transfer_scratch_counts_as_buffers, pair_options(512));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Ring, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

}  // namespace
}  // namespace kiri::comm::testing
