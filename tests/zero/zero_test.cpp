// ZeRO stages 1-3, FSDP strategies and mixed precision against stage 0 (DDP)
// on the same ranks and data. The same bodies run on ranks as threads (plain
// ctest) and on MPI ranks (kiri_zero_tests_mpi2/4).
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "comm/harness.h"
#include "gemm_lowp_paths.h"
#include "train_test_util.h"
#include "zero/zero_bodies.h"

namespace kiri::train {
namespace {

namespace test = ::kiri::test;

using comm::Communicator;
using D = kiri::Precision;

const auto kArchs = ::testing::Values(kiri::Arch::kGpt2, kiri::Arch::kLlama);

// Each stage for each architecture (zero_bodies.h: GPT-2, and a Llama with grouped-query
// attention and an untied head).
class Stages : public ::testing::TestWithParam<std::tuple<int, kiri::Arch>> {
 protected:
  int stage() const { return std::get<0>(GetParam()); }
  kiri::Arch arch() const { return std::get<1>(GetParam()); }
};

TEST_P(Stages, Fp32EqualsStage0OnTwoRanks) {
  const ZeroCase k{.stage = stage(), .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(Stages, Fp32EqualsStage0OnFourRanks) {
  const ZeroCase k{.stage = stage(), .arch = arch()};
  KIRI_RUN_RANKS(4, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(Stages, AccumulationEqualsStage0) {
  const ZeroCase k{.stage = stage(), .grad_accum = 3, .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(Stages, MemoryFp32OnTwoRanks) {
  const ZeroCase k{.stage = stage(), .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_memory_matches_formula(w, k); });
}
TEST_P(Stages, MemoryBf16OnFourRanks) {
  const ZeroCase k{.stage = stage(), .dtype = D::kBf16, .arch = arch()};
  KIRI_RUN_RANKS(4, [k](Communicator& w) { zero_memory_matches_formula(w, k); });
}
INSTANTIATE_TEST_SUITE_P(Zero, Stages, ::testing::Combine(::testing::Values(0, 1, 2, 3), kArchs),
                         [](const auto& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
                                  arch_name(std::get<1>(info.param));
                         });

// The FSDP strategies and checkpoints across layouts, for each architecture.
class ZeroArch : public ::testing::TestWithParam<kiri::Arch> {};

TEST_P(ZeroArch, Stage3WithoutPrefetch) {
  const ZeroCase k{.stage = 3, .prefetch = false, .arch = GetParam()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(ZeroArch, Stage3TwoBlocksPerUnit) {
  const ZeroCase k{.stage = 3, .wrap_blocks = 2, .arch = GetParam()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(ZeroArch, HybridShardOnFourRanks) {
  const ZeroCase k{.stage = 3, .shard_group_size = 2, .arch = GetParam()};
  KIRI_RUN_RANKS(4, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(ZeroArch, HybridShardMemory) {
  const ZeroCase k{.stage = 3, .shard_group_size = 2, .arch = GetParam()};
  KIRI_RUN_RANKS(4, [k](Communicator& w) { zero_memory_matches_formula(w, k); });
}
TEST_P(ZeroArch, Stage3WithActivationCheckpointing) {
  const ZeroCase k{.stage = 3, .checkpoint_every = 1, .arch = GetParam()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(ZeroArch, CheckpointAcrossLayouts) {
  const kiri::Arch a = GetParam();
  KIRI_RUN_RANKS(2, [a](Communicator& w) { zero_checkpoint_across_layouts(w, a); });
}
TEST_P(ZeroArch, CheckpointAcrossLayoutsOnFourRanks) {
  const kiri::Arch a = GetParam();
  KIRI_RUN_RANKS(4, [a](Communicator& w) { zero_checkpoint_across_layouts(w, a); });
}
INSTANTIATE_TEST_SUITE_P(Zero, ZeroArch, kArchs,
                         [](const auto& info) { return std::string(arch_name(info.param)); });

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
TEST(Zero, CheckpointRefusesBadShards) {
  KIRI_RUN_RANKS(2, zero_checkpoint_refuses_bad_shards);
}

// The 16-bit runs through each gemm_lowp path (oneDNN's matmul, the
// fp32-panel path), skipped with the reason where this CPU lacks one. About
// a second each on 2 cores.
class LowpStages
    : public ::testing::TestWithParam<std::tuple<int, kernels::LowpGemmImpl, kiri::Arch>> {
 protected:
  ZeroCase with(DType d) const {
    return {.stage = std::get<0>(GetParam()),
            .dtype = d == DType::kBF16 ? D::kBf16 : D::kFp16,
            .arch = std::get<2>(GetParam())};
  }
};

TEST_P(LowpStages, Bf16EqualsBf16Stage0) {
  KIRI_USE_GEMM_LOWP(std::get<1>(GetParam()), DType::kBF16);
  const ZeroCase k = with(DType::kBF16);
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
TEST_P(LowpStages, Fp16EqualsFp16Stage0) {
  KIRI_USE_GEMM_LOWP(std::get<1>(GetParam()), DType::kF16);
  const ZeroCase k = with(DType::kF16);
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
INSTANTIATE_TEST_SUITE_P(Zero, LowpStages,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(kernels::LowpGemmImpl::kViaF32,
                                                              kernels::LowpGemmImpl::kOneDnnMatmul),
                                            kArchs),
                         [](const auto& info) {
                           return "stage" + std::to_string(std::get<0>(info.param)) + "_" +
                                  kernels::gemm_lowp_impl_name(std::get<1>(info.param)) + "_" +
                                  arch_name(std::get<2>(info.param));
                         });

class LowpPath : public ::testing::TestWithParam<std::tuple<kernels::LowpGemmImpl, kiri::Arch>> {
 protected:
  kernels::LowpGemmImpl path() const { return std::get<0>(GetParam()); }
  kiri::Arch arch() const { return std::get<1>(GetParam()); }
};

TEST_P(LowpPath, Bf16TracksFp32) {
  KIRI_USE_GEMM_LOWP(path(), DType::kBF16);
  const ZeroCase k{.stage = 3, .dtype = D::kBf16, .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { mixed_precision_tracks_fp32(w, k); });
}
TEST_P(LowpPath, Fp16TracksFp32) {
  KIRI_USE_GEMM_LOWP(path(), DType::kF16);
  const ZeroCase k{.stage = 2, .dtype = D::kFp16, .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { mixed_precision_tracks_fp32(w, k); });
}
TEST_P(LowpPath, Bf16Stage2WithActivationCheckpointingEvery2) {
  KIRI_USE_GEMM_LOWP(path(), DType::kBF16);
  const ZeroCase k{.stage = 2, .dtype = D::kBf16, .checkpoint_every = 2, .arch = arch()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { zero_equivalence(w, k); });
}
INSTANTIATE_TEST_SUITE_P(Zero, LowpPath, ::testing::Combine(test::kGemmLowpPaths, kArchs),
                         [](const auto& info) {
                           return std::string(
                                      kernels::gemm_lowp_impl_name(std::get<0>(info.param))) +
                                  "_" + arch_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace kiri::train
