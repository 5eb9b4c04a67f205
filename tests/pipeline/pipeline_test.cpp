// Layout equivalence for dp x pp (every schedule) against one process, and
// checkpoints across layouts. The same bodies run on ranks as threads (plain
// ctest) and on MPI ranks (kiri_pipeline_tests_mpi2/4).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>

#include "comm/harness.h"
#include "gemm_lowp_paths.h"
#include "pipeline/pipeline_bodies.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

namespace test = ::kiri::test;

using comm::Communicator;

void run(LayoutCase k) {
  KIRI_RUN_RANKS(k.dp * k.tp * k.pp, [k](Communicator& w) { layout_equivalence(w, k); });
}

const auto kArchs = ::testing::Values(kiri::Arch::kGpt2, kiri::Arch::kLlama);
std::string arch_param_name(const ::testing::TestParamInfo<kiri::Arch>& info) {
  return arch_name(info.param);
}

// The layout matrix for each architecture: GPT-2, and a Llama with grouped-query attention
// and an untied head (pipeline_bodies.h).
class Layout : public ::testing::TestWithParam<kiri::Arch> {
 protected:
  void run(LayoutCase k) {
    k.arch = GetParam();
    ::kiri::train::run(k);
  }
};

TEST_P(Layout, OneProcessMicroBatches) {
  run({.dp = 1, .pp = 1});
}
TEST_P(Layout, Dp2) {
  run({.dp = 2, .pp = 1});
}
TEST_P(Layout, Dp4) {
  run({.dp = 4, .pp = 1});
}
TEST_P(Layout, Pp2GPipe) {
  run({.pp = 2, .schedule = "gpipe"});
}
TEST_P(Layout, Pp2OneFOneB) {
  run({.pp = 2, .schedule = "1f1b"});
}
TEST_P(Layout, Pp2Interleaved) {
  run({.pp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST_P(Layout, Pp4GPipe) {
  run({.pp = 4, .schedule = "gpipe"});
}
TEST_P(Layout, Pp4OneFOneB) {
  run({.pp = 4, .schedule = "1f1b"});
}
TEST_P(Layout, Pp4Interleaved) {
  run({.pp = 4, .schedule = "interleaved", .virtual_stages = 2});
}
TEST_P(Layout, Dp2Pp2GPipe) {
  run({.dp = 2, .pp = 2, .schedule = "gpipe"});
}
TEST_P(Layout, Dp2Pp2OneFOneB) {
  run({.dp = 2, .pp = 2, .schedule = "1f1b"});
}
TEST_P(Layout, Dp2Pp2Interleaved) {
  run({.dp = 2, .pp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST_P(Layout, Dp2Pp2Zero1) {
  run({.dp = 2, .pp = 2, .zero_stage = 1});
}
TEST_P(Layout, Pp2OneMicroBatch) {
  run({.pp = 2, .microbatches = 1});
}

TEST_P(Layout, Tp2) {
  run({.tp = 2});
}
TEST_P(Layout, Tp4) {
  run({.tp = 4});
}
TEST_P(Layout, Dp2Tp2) {
  run({.dp = 2, .tp = 2});
}
TEST_P(Layout, Tp2Pp2) {
  run({.pp = 2, .tp = 2});
}
TEST_P(Layout, Tp2Pp2GPipe) {
  run({.pp = 2, .tp = 2, .schedule = "gpipe"});
}
TEST_P(Layout, Tp2Pp2Interleaved) {
  run({.pp = 2, .tp = 2, .schedule = "interleaved", .virtual_stages = 2});
}
TEST_P(Layout, Dp2Tp2Zero1) {
  run({.dp = 2, .tp = 2, .zero_stage = 1});
}
TEST_P(Layout, Dp2Tp2Zero3) {
  run({.dp = 2, .tp = 2, .zero_stage = 3});
}
TEST_P(Layout, Dp2Pp2Recompute) {
  run({.dp = 2, .pp = 2, .recompute = true});
}

// Sequence parallelism (parallel.sequence_parallel) on the tp layouts above.
TEST_P(Layout, Tp2Sp) {
  run({.tp = 2, .sequence_parallel = true});
}
TEST_P(Layout, Tp4Sp) {
  run({.tp = 4, .sequence_parallel = true});
}
TEST_P(Layout, Dp2Tp2Sp) {
  run({.dp = 2, .tp = 2, .sequence_parallel = true});
}
TEST_P(Layout, Dp2Tp2Zero1Sp) {
  run({.dp = 2, .tp = 2, .zero_stage = 1, .sequence_parallel = true});
}
TEST_P(Layout, Dp2Tp2Zero3Sp) {
  run({.dp = 2, .tp = 2, .zero_stage = 3, .sequence_parallel = true});
}
TEST_P(Layout, Tp2Pp2Sp) {
  run({.pp = 2, .tp = 2, .sequence_parallel = true});
}
TEST_P(Layout, Tp2Pp2RecomputeSp) {
  run({.pp = 2, .tp = 2, .recompute = true, .sequence_parallel = true});
}
TEST_P(Layout, Tp2SpBytes) {
  LayoutCase k{.tp = 2, .arch = GetParam()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { sequence_parallel_bytes(w, k); });
}

// Selective recomputation (parallel.activation_checkpointing = selective): equal to 1x1x1
// within the matrix's tolerance and bitwise equal to the same layout without it.
const std::vector<std::string> kAllModules{"core_attn", "layernorm", "mlp_act"};
void run_selective(LayoutCase k) {
  KIRI_RUN_RANKS(k.dp * k.tp * k.pp, [k](Communicator& w) { selective_equivalence(w, k); });
}
TEST_P(Layout, OneProcessSelective) {
  run_selective({.selective = kAllModules, .arch = GetParam()});
}
TEST_P(Layout, Tp2Selective) {
  run_selective({.tp = 2, .selective = kAllModules, .arch = GetParam()});
}
TEST_P(Layout, Tp2SpSelective) {
  run_selective({.tp = 2, .sequence_parallel = true, .selective = kAllModules, .arch = GetParam()});
}
TEST_P(Layout, Tp2SpSelectiveCoreAttn) {
  run_selective(
      {.tp = 2, .sequence_parallel = true, .selective = {"core_attn"}, .arch = GetParam()});
}
TEST_P(Layout, Dp2Zero3Selective) {
  run_selective({.dp = 2, .zero_stage = 3, .selective = kAllModules, .arch = GetParam()});
}
TEST_P(Layout, Pp2Selective) {
  run_selective({.pp = 2, .selective = kAllModules, .arch = GetParam()});
}
TEST_P(Layout, Tp2SpSelectiveBytes) {
  LayoutCase k{.tp = 2, .selective = kAllModules, .arch = GetParam()};
  KIRI_RUN_RANKS(2, [k](Communicator& w) { sequence_parallel_bytes(w, k); });
}

INSTANTIATE_TEST_SUITE_P(Arch, Layout, kArchs, arch_param_name);

// parallel.sequence_parallel is refused, a config error with the numbers, without tp > 1
// and when tp does not divide the micro-batch's token rows.
void expect_config_error(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a config error saying: " << words;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}
TEST(LayoutSequenceParallel, RefusesTp1) {
  RunConfig c = equivalence_config(8, 4, 32, 2);
  c.parallel.sequence_parallel = true;
  expect_config_error([&] { Trainer t(c); }, "needs parallel.tp > 1, got parallel.tp = 1");
}
TEST(LayoutSequenceParallel, RefusesRowsThatDoNotSplit) {
  KIRI_RUN_RANKS(2, [](Communicator& w) {
    RunConfig c = equivalence_config(8, 4, 32, 1);
    c.train.seq_len = 15;
    c.parallel.tp = 2;
    c.parallel.sequence_parallel = true;
    expect_config_error([&] { Trainer t(c, w); },
                        "train.micro_batch x train.seq_len = 1 x 15 = 15 token rows do not split "
                        "over parallel.tp = 2");
  });
}

// parallel.recompute_modules: an unknown module names the valid ones; modules need selective.
TEST(LayoutSelective, RefusesUnknownModule) {
  RunConfig c = equivalence_config(8, 4, 32, 2);
  c.parallel.activation_checkpointing = ActivationCheckpointing::kSelective;
  c.parallel.recompute_modules = {"core_attn", "mlp"};
  expect_config_error([&] { Trainer t(c); },
                      "parallel.recompute_modules: unknown module 'mlp' (valid: core_attn, "
                      "layernorm, mlp_act)");
}
TEST(LayoutSelective, RefusesModulesWithoutSelective) {
  RunConfig c = equivalence_config(8, 4, 32, 2);
  c.parallel.activation_checkpointing = ActivationCheckpointing::kFull;
  c.parallel.recompute_modules = {"core_attn"};
  expect_config_error([&] { Trainer t(c); },
                      "parallel.recompute_modules (1 given) needs "
                      "parallel.activation_checkpointing = selective");
}

// A Llama whose head is tied to the embedding: the first and last stage sum its gradient.
TEST(LayoutLlama, TiedPp2) {
  run({.pp = 2, .arch = kiri::Arch::kLlama, .tied = true});
}

// The bf16 layouts through each gemm_lowp path (about 1.5 s, 1.5 s and 3 s
// each on 2 cores), for each architecture.
class LayoutBf16 : public ::testing::TestWithParam<std::tuple<kernels::LowpGemmImpl, kiri::Arch>> {
 protected:
  void run(LayoutCase k) {
    k.arch = std::get<1>(GetParam());
    ::kiri::train::run(k);
  }
};

TEST_P(LayoutBf16, Pp2Bf16) {
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), DType::kBF16);
  run({.pp = 2, .bf16 = true});
}
TEST_P(LayoutBf16, Tp2Bf16) {
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), DType::kBF16);
  run({.tp = 2, .bf16 = true});
}
TEST_P(LayoutBf16, Tp2SpBf16) {
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), DType::kBF16);
  run({.tp = 2, .bf16 = true, .sequence_parallel = true});
}
TEST_P(LayoutBf16, Tp2SpSelectiveBf16) {
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), DType::kBF16);
  LayoutCase k{.tp = 2, .bf16 = true, .sequence_parallel = true, .selective = kAllModules};
  k.arch = std::get<1>(GetParam());
  run_selective(k);
}
TEST_P(LayoutBf16, Tp2Pp2RecomputeBf16) {
  KIRI_USE_GEMM_LOWP(std::get<0>(GetParam()), DType::kBF16);
  run({.pp = 2, .tp = 2, .bf16 = true, .recompute = true});
}
INSTANTIATE_TEST_SUITE_P(Layout, LayoutBf16, ::testing::Combine(test::kGemmLowpPaths, kArchs),
                         [](const auto& info) {
                           return std::string(
                                      kernels::gemm_lowp_impl_name(std::get<0>(info.param))) +
                                  "_" + arch_name(std::get<1>(info.param));
                         });

// Fine-tuning data (a chat corpus with a loss mask): the loss is the mean over the global
// batch's counted targets on every layout, so each equals 1x1x1 on the whole batch. GPT-2
// only: the mask reaches the loss alike for both architectures.
TEST(MaskedLayout, Dp2Zero3) {
  run({.dp = 2, .zero_stage = 3, .masked = true});
}
TEST(MaskedLayout, Tp2) {
  run({.tp = 2, .masked = true});
}
TEST(MaskedLayout, Pp2OneFOneB) {
  run({.pp = 2, .schedule = "1f1b", .masked = true});
}

class LayoutCheckpoint : public ::testing::TestWithParam<kiri::Arch> {
 protected:
  void round_trip(int ranks, LayoutCase k) {
    k.arch = GetParam();
    KIRI_RUN_RANKS(ranks, [k](Communicator& w) { layout_checkpoint_round_trip(w, k); });
  }
};

TEST_P(LayoutCheckpoint, Tp2RoundTrip) {
  round_trip(2, {.tp = 2});
}
TEST_P(LayoutCheckpoint, Tp2Pp2RoundTrip) {
  round_trip(4, {.pp = 2, .tp = 2});
}
TEST_P(LayoutCheckpoint, Pp2RoundTrip) {
  round_trip(2, {.pp = 2});
}
TEST_P(LayoutCheckpoint, Dp2Pp2Zero1RoundTrip) {
  round_trip(4, {.dp = 2, .pp = 2, .zero_stage = 1});
}
INSTANTIATE_TEST_SUITE_P(Arch, LayoutCheckpoint, kArchs, arch_param_name);

}  // namespace
}  // namespace kiri::train
