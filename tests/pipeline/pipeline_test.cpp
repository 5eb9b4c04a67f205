// Layout equivalence for dp x pp (every schedule) against one process, and
// checkpoints across layouts. The same bodies run on ranks as threads (plain
// ctest) and on MPI ranks (kiri_pipeline_tests_mpi2/4).
#include <gtest/gtest.h>

#include "comm/harness.h"
#include "gemm_lowp_paths.h"
#include "pipeline/pipeline_bodies.h"

namespace kiri::train {
namespace {

namespace test = ::kiri::test;

using comm::Communicator;

void run(LayoutCase k) {
  KIRI_RUN_RANKS(k.dp * k.tp * k.pp, [k](Communicator& w) { layout_equivalence(w, k); });
}

TEST(Layout, OneProcessMicroBatches) {
  run({.dp = 1, .pp = 1});
}
TEST(Layout, Dp2) {
  run({.dp = 2, .pp = 1});
}
TEST(Layout, Dp4) {
  run({.dp = 4, .pp = 1});
}
TEST(Layout, Pp2GPipe) {
  run({.pp = 2, .schedule = "gpipe"});
}
TEST(Layout, Pp2OneFOneB) {
  run({.pp = 2, .schedule = "1f1b"});
}
TEST(Layout, Pp2Interleaved) {
  run({.pp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST(Layout, Pp4GPipe) {
  run({.pp = 4, .schedule = "gpipe"});
}
TEST(Layout, Pp4OneFOneB) {
  run({.pp = 4, .schedule = "1f1b"});
}
TEST(Layout, Pp4Interleaved) {
  run({.pp = 4, .schedule = "interleaved", .virtual_stages = 2});
}
TEST(Layout, Dp2Pp2GPipe) {
  run({.dp = 2, .pp = 2, .schedule = "gpipe"});
}
TEST(Layout, Dp2Pp2OneFOneB) {
  run({.dp = 2, .pp = 2, .schedule = "1f1b"});
}
TEST(Layout, Dp2Pp2Interleaved) {
  run({.dp = 2, .pp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST(Layout, Dp2Pp2Zero1) {
  run({.dp = 2, .pp = 2, .zero_stage = 1});
}
TEST(Layout, Pp2OneMicroBatch) {
  run({.pp = 2, .microbatches = 1});
}

TEST(Layout, Tp2) {
  run({.tp = 2});
}
TEST(Layout, Tp4) {
  run({.tp = 4});
}
TEST(Layout, Dp2Tp2) {
  run({.dp = 2, .tp = 2});
}
TEST(Layout, Tp2Pp2) {
  run({.pp = 2, .tp = 2});
}
TEST(Layout, Tp2Pp2GPipe) {
  run({.pp = 2, .tp = 2, .schedule = "gpipe"});
}
TEST(Layout, Tp2Pp2Interleaved) {
  run({.pp = 2, .tp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST(Layout, Dp2Tp2Zero1) {
  run({.dp = 2, .tp = 2, .zero_stage = 1});
}
TEST(Layout, Dp2Tp2Zero3) {
  run({.dp = 2, .tp = 2, .zero_stage = 3});
}
TEST(Layout, Dp2Pp2Recompute) {
  run({.dp = 2, .pp = 2, .recompute = true});
}

// The bf16 layouts through each gemm_lowp path (about 1.5 s, 1.5 s and 3 s
// each on 2 cores).
class LayoutBf16 : public ::testing::TestWithParam<kernels::LowpGemmImpl> {};

TEST_P(LayoutBf16, Pp2Bf16) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  run({.pp = 2, .bf16 = true});
}
TEST_P(LayoutBf16, Tp2Bf16) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  run({.tp = 2, .bf16 = true});
}
TEST_P(LayoutBf16, Tp2Pp2RecomputeBf16) {
  KIRI_USE_GEMM_LOWP(GetParam(), DType::kBF16);
  run({.pp = 2, .tp = 2, .bf16 = true, .recompute = true});
}
INSTANTIATE_TEST_SUITE_P(Layout, LayoutBf16, test::kGemmLowpPaths, test::gemm_lowp_path_name);

TEST(LayoutCheckpoint, Tp2RoundTrip) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { layout_checkpoint_round_trip(w, {.tp = 2}); });
}
TEST(LayoutCheckpoint, Tp2Pp2RoundTrip) {
  KIRI_RUN_RANKS(4, [](Communicator& w) { layout_checkpoint_round_trip(w, {.pp = 2, .tp = 2}); });
}
TEST(LayoutCheckpoint, Pp2RoundTrip) {
  KIRI_RUN_RANKS(2, [](Communicator& w) { layout_checkpoint_round_trip(w, {.pp = 2}); });
}
TEST(LayoutCheckpoint, Dp2Pp2Zero1RoundTrip) {
  KIRI_RUN_RANKS(4, [](Communicator& w) {
    layout_checkpoint_round_trip(w, {.dp = 2, .pp = 2, .zero_stage = 1});
  });
}

}  // namespace
}  // namespace kiri::train
