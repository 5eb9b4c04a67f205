// The vocab-parallel cross-entropy against kernels::softmax_xent_forward and
// _backward on the whole, unpadded logits. Padding columns hold large values
// (they must not count), some targets are ignored (< 0), and targets sit on
// both edges of the vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"
#include "kiri/parallel/tp/cross_entropy.h"
#include "kiri/parallel/tp/utils.h"
#include "tp/tp_util.h"

namespace kiri::parallel::tp {
namespace {

using comm::Communicator;
using testing::empty;
using testing::randn;

constexpr int64_t kN = 12;

struct Case {
  int64_t vocab;     // real
  int64_t multiple;  // padded vocabulary = pad_vocab(vocab, multiple)
  double tolerance;  // relative, of lse; of the largest gradient
};

// Logits [N, Vp] (padding columns 100), targets with ignored rows and both edges.
std::pair<Tensor, Tensor> make_inputs(int64_t V, int64_t Vp) {
  Tensor logits = randn({kN, Vp}, 21, 3.0);
  float* x = logits.data<float>();
  for (int64_t i = 0; i < kN; ++i) std::fill(x + i * Vp + V, x + (i + 1) * Vp, 100.0f);
  std::vector<int32_t> t = testing::random_ints(kN, 0, static_cast<int32_t>(V), 22);
  t[0] = 0, t[1] = static_cast<int32_t>(V - 1), t[3] = -1, t[7] = -100;
  return {logits, testing::ints({kN}, t)};
}

void expect_near_rel(const Tensor& got, const Tensor& want, double scale_floor, double tol,
                     const char* what, int rank) {
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double w = want.item(i), scale = std::max(std::fabs(w), scale_floor);
    EXPECT_NEAR(got.item(i), w, tol * scale) << what << " " << i << " on rank " << rank;
  }
}

void cross_entropy_matches_the_kernel(Communicator& tp, const Case& k) {
  testing::one_thread_per_rank();
  const int64_t Vp = pad_vocab(k.vocab, k.multiple);
  const VocabRange range = vocab_range(Vp, tp.rank(), tp.size());
  auto [logits, targets] = make_inputs(k.vocab, Vp);
  // The reference: one process, the real columns only.
  Tensor full = testing::columns(logits, 0, k.vocab), ref_loss = empty({kN}), ref_lse = empty({kN});
  kernels::softmax_xent_forward<float>(ref_loss, ref_lse, full, targets);
  Tensor local = testing::columns(logits, range.start, range.end);
  Tensor loss = empty({kN}), lse = empty({kN});
  const int64_t calls = tp.stats(comm::OpKind::kAllReduce).calls;
  vocab_parallel_cross_entropy_forward(tp, loss, lse, local, targets, range.start, k.vocab,
                                       testing::allocator());
  EXPECT_EQ(tp.stats(comm::OpKind::kAllReduce).calls - calls, 3);
  expect_near_rel(lse, ref_lse, 1.0, k.tolerance, "lse", tp.rank());
  // loss = lse - z: its error is lse's, so it is measured against lse.
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(loss.item(i), ref_loss.item(i), k.tolerance * std::fabs(ref_lse.item(i)))
        << "loss " << i << " on rank " << tp.rank();
    if (targets.data<int32_t>()[i] < 0) {
      EXPECT_EQ(loss.item(i), 0.0);
    }
  }
  // Backward: this rank's columns of the kernel's dlogits, zero on padding.
  Tensor dloss = randn({kN}, 23);
  kernels::softmax_xent_backward<float>(full, ref_lse, targets, dloss);
  vocab_parallel_cross_entropy_backward(local, lse, targets, dloss, range.start, k.vocab);
  EXPECT_EQ(tp.stats(comm::OpKind::kAllReduce).calls - calls, 3);  // no communication
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < range.size(); ++j) {
      const int64_t col = range.start + j;
      const double got = local.item(i * range.size() + j);
      const double want = col < k.vocab ? full.item(i * k.vocab + col) : 0.0;
      EXPECT_NEAR(got, want, k.tolerance * std::fabs(dloss.item(i)))
          << "dlogits[" << i << ", " << col << "] on rank " << tp.rank();
    }
}

// V = 50 padded to 52: on 4 ranks rank 3 holds columns 39..51, two of them padding.
KIRI_TP_TESTS(TpCrossEntropy, PaddedVocabularyEqualsTheKernel, [](Communicator& tp) {
  cross_entropy_matches_the_kernel(tp, {50, 4, 1e-6});
})
// No padding at all.
KIRI_TP_TESTS(TpCrossEntropy, EvenVocabularyEqualsTheKernel, [](Communicator& tp) {
  cross_entropy_matches_the_kernel(tp, {48, 4, 1e-6});
})
// Slices wider than the 1024-column summing block; 4099 padded to 4100.
KIRI_TP_TESTS(TpCrossEntropy, WideVocabularyEqualsTheKernel, [](Communicator& tp) {
  cross_entropy_matches_the_kernel(tp, {4099, 4, 1e-6});
})

// A target in the padding (>= the real vocabulary) is an error on every rank,
// raised before any collective.
void target_in_padding(Communicator& tp) {
  const VocabRange range = vocab_range(52, tp.rank(), tp.size());
  auto [logits, targets] = make_inputs(50, 52);
  targets.data<int32_t>()[5] = 50;
  Tensor local = testing::columns(logits, range.start, range.end);
  Tensor loss = empty({kN}), lse = empty({kN});
  try {
    vocab_parallel_cross_entropy_forward(tp, loss, lse, local, targets, range.start, 50,
                                         testing::allocator());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("target 50 at row 5 outside the vocabulary of 50"),
              std::string::npos)
        << e.message();
  }
  tp.barrier();
}
TEST(TpCrossEntropy, TargetInPaddingIsAnErrorOnFourRanks) {
  KIRI_RUN_RANKS(4, target_in_padding);
}

}  // namespace
}  // namespace kiri::parallel::tp
