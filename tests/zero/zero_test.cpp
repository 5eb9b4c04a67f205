// ZeRO stages 1-3, FSDP strategies and mixed precision against stage 0 (DDP)
// on the same ranks and data. The same bodies run on ranks as threads (plain
// ctest) and on MPI ranks (kiri_zero_tests_mpi2/4).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "comm/harness.h"
#include "gemm_lowp_paths.h"
#include "zero/zero_bodies.h"

namespace kiri::train {
namespace {

namespace test = ::kiri::test;

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

// The 16-bit runs through each gemm_lowp path (oneDNN's matmul, the
// fp32-panel path), skipped with the reason where this CPU lacks one. About
// a second each on 2 cores.
class LowpStages : public ::testing::TestWithParam<std::tuple<int, kernels::LowpGemmImpl>> {};

TEST_P(LowpStages, Bf16EqualsBf16Stage0) {
  const int stage = std::get<0>(GetParam());
  KIRI_USE_GEMM_LOWP(std::get<1>(GetParam()), DType::kBF16);
  KIRI_RUN_RANKS(
      2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage, .dtype = D::kBF16}); });
}
TEST_P(LowpStages, Fp16EqualsFp16Stage0) {
  const int stage = std::get<0>(GetParam());
  KIRI_USE_GEMM_LOWP(std::get<1>(GetParam()), DType::kF16);
  KIRI_RUN_RANKS(
      2, [stage](Communicator& w) { zero_equivalence(w, {.stage = stage, .dtype = D::kF16}); });
}
INSTANTIATE_TEST_SUITE_P(
    Zero, LowpStages,
    ::testing::Combine(::testing::Values(0, 1, 2, 3),
                       ::testing::Values(kernels::LowpGemmImpl::kViaF32,
                                         kernels::LowpGemmImpl::kOneDnnMatmul)),
    [](const auto& info) {
      return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
             kernels::gemm_lowp_impl_name(std::get<1>(info.param));
    });

class LowpPath : public ::testing::TestWithParam<kernels::LowpGemmImpl> {};

TEST_P(LowpPath, Bf16TracksFp32) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  KIRI_RUN_RANKS(
      2, [](Communicator& w) { mixed_precision_tracks_fp32(w, {.stage = 3, .dtype = D::kBF16}); });
}
TEST_P(LowpPath, Fp16TracksFp32) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kF16);
  KIRI_RUN_RANKS(
      2, [](Communicator& w) { mixed_precision_tracks_fp32(w, {.stage = 2, .dtype = D::kF16}); });
}
TEST_P(LowpPath, Bf16Stage2WithActivationCheckpointingEvery2) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  KIRI_RUN_RANKS(2, [](Communicator& w) {
    zero_equivalence(w, {.stage = 2, .dtype = D::kBF16, .checkpoint_every = 2});
  });
}
INSTANTIATE_TEST_SUITE_P(Zero, LowpPath, test::kGemmLowpPaths, test::gemm_lowp_path_name);

}  // namespace
}  // namespace kiri::train
