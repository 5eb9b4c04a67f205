// Optimizer offload (ZeRO-Offload to NVMe) against the same run in memory: bitwise
// equal losses and states at every ZeRO stage, layout and dtype. The same bodies run
// on ranks as threads (plain ctest) and on MPI ranks (kiri_offload_train_tests_mpiN).
#include <gtest/gtest.h>

#include "comm/harness.h"
#include "offload_train/offload_bodies.h"

namespace kiri::train {
namespace {

using comm::Communicator;
using D = ComputeDType;

class OffloadStages : public ::testing::TestWithParam<int> {};

TEST_P(OffloadStages, TwoRanksFp32) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(2, [stage](Communicator& w) { offload_equals_memory(w, {.stage = stage}); });
}
TEST_P(OffloadStages, TwoRanksBf16Accumulation) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(2, [stage](Communicator& w) {
    offload_equals_memory(w, {.stage = stage, .dtype = D::kBF16, .grad_accum = 2});
  });
}
TEST_P(OffloadStages, FourRanksBf16) {
  const int stage = GetParam();
  KIRI_RUN_RANKS(4, [stage](Communicator& w) {
    offload_equals_memory(w, {.stage = stage, .dtype = D::kBF16});
  });
}
INSTANTIATE_TEST_SUITE_P(Offload, OffloadStages, ::testing::Values(0, 1, 2, 3),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

TEST(Offload, OneRankFp32) {
  KIRI_RUN_RANKS(1, [](Communicator& w) { offload_equals_memory(w, {.stage = 0}); });
}
TEST(Offload, OneRankBf16Accumulation) {
  KIRI_RUN_RANKS(1, [](Communicator& w) {
    offload_equals_memory(w, {.stage = 0, .dtype = D::kBF16, .grad_accum = 3});
  });
}
TEST(Offload, TensorParallelTwo) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { offload_equals_memory(w, {.stage = 0, .tp = 2}); });
}
TEST(Offload, TensorParallelTwoStage3Bf16) {
  KIRI_RUN_RANKS(4, [](Communicator& w) {
    offload_equals_memory(w, {.stage = 3, .tp = 2, .dtype = D::kBF16});
  });
}
TEST(Offload, PipelineTwo) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { offload_equals_memory(w, {.stage = 0, .pp = 2}); });
}
TEST(Offload, PipelineTwoStage1Bf16) {
  KIRI_RUN_RANKS(4, [](Communicator& w) {
    offload_equals_memory(w, {.stage = 1, .pp = 2, .dtype = D::kBF16, .grad_accum = 2});
  });
}
TEST(Offload, TwoBuffersNoReadAhead) {
  KIRI_RUN_RANKS(2, [](Communicator& w) {
    offload_equals_memory(w, {.stage = 2, .dtype = D::kBF16, .buffer_count = 2});
  });
}

}  // namespace
}  // namespace kiri::train
