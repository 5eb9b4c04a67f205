// ZeRO stages 1-3, FSDP strategies and mixed precision against stage 0 (DDP)
// on the same ranks and data. The same bodies run on ranks as threads (plain
// ctest) and on MPI ranks (kiri_zero_tests_mpi2/4).
#include <gtest/gtest.h>

#include "comm/harness.h"
#include "zero/zero_bodies.h"

namespace kiri::train {
namespace {

using comm::Communicator;
using D = ComputeDType;

class Stages : public ::testing::TestWithParam<int> {};

TEST_P(Stages, Fp32EqualsStage0OnTwoRanks) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage}); });
}
TEST_P(Stages, Fp32EqualsStage0OnFourRanks) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(4, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage}); });
}
TEST_P(Stages, Bf16EqualsBf16Stage0) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(
      2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage, .dtype = D::kBF16}); });
}
TEST_P(Stages, Fp16EqualsFp16Stage0) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(
      2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage, .dtype = D::kF16}); });
}
TEST_P(Stages, AccumulationEqualsStage0) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(
      2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage, .grad_accum = 3}); });
}
TEST_P(Stages, MemoryFp32OnTwoRanks) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(2, [stage](Communicator& w) { zero_memory_matches_formula(w, {.stage = stage}); });
}
TEST_P(Stages, MemoryBf16OnFourRanks) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(4, [stage](Communicator& w) {
    zero_memory_matches_formula(w, {.stage = stage, .dtype = D::kBF16});
  });
}
INSTANTIATE_TEST_SUITE_P(Zero, Stages, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

TEST(Zero, Stage3WithoutPrefetch) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { zero_equivalence(w, {.stage = 3, .prefetch = false}); });
}
TEST(Zero, Stage3TwoBlocksPerUnit) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { zero_equivalence(w, {.stage = 3, .wrap_blocks = 2}); });
}
TEST(Zero, HybridShardOnFourRanks) {
  KIRI_RUN_RANKS(4,
                 [](Communicator& w) { zero_equivalence(w, {.stage = 3, .shard_group_size = 2}); });
}
TEST(Zero, HybridShardMemory) {
  KIRI_RUN_RANKS(4, [](Communicator& w) {
    zero_memory_matches_formula(w, {.stage = 3, .shard_group_size = 2});
  });
}
TEST(Zero, Bf16TracksFp32) {
  KIRI_RUN_RANKS(
      2, [](Communicator& w) { mixed_precision_tracks_fp32(w, {.stage = 3, .dtype = D::kBF16}); });
}
TEST(Zero, Fp16TracksFp32) {
  KIRI_RUN_RANKS(
      2, [](Communicator& w) { mixed_precision_tracks_fp32(w, {.stage = 2, .dtype = D::kF16}); });
}
TEST(Zero, CommVolumeOnTwoRanks) {
  KIRI_RUN_RANKS(2, zero_comm_volume);
}
TEST(Zero, CommVolumeOnFourRanks) {
  KIRI_RUN_RANKS(4, zero_comm_volume);
}
TEST(Zero, Fp16SkipsTheOverflowingStepStage0) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { fp16_skips_the_overflowing_step(w, 0); });
}
TEST(Zero, Fp16SkipsTheOverflowingStepStage3) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { fp16_skips_the_overflowing_step(w, 3); });
}
TEST(Zero, CheckpointAcrossLayouts) {
  KIRI_RUN_RANKS(2, zero_checkpoint_across_layouts);
}
TEST(Zero, CheckpointAcrossLayoutsOnFourRanks) {
  KIRI_RUN_RANKS(4, zero_checkpoint_across_layouts);
}
TEST(Zero, CheckpointRefusesBadShards) {
  KIRI_RUN_RANKS(2, zero_checkpoint_refuses_bad_shards);
}
TEST(Zero, Stage3WithActivationCheckpointing) {
  KIRI_RUN_RANKS(2,
                 [](Communicator& w) { zero_equivalence(w, {.stage = 3, .checkpoint_every = 1}); });
}
TEST(Zero, Bf16Stage2WithActivationCheckpointingEvery2) {
  KIRI_RUN_RANKS(2, [](Communicator& w) {
    zero_equivalence(w, {.stage = 2, .dtype = D::kBF16, .checkpoint_every = 2});
  });
}

}  // namespace
}  // namespace kiri::train
