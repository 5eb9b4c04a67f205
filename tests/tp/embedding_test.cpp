// The vocab-parallel embedding against kernels::embedding_forward and
// token_embedding_backward on the whole table: V = 50 padded to 52, so on 4
// ranks the last slice holds two padding rows; F32, BF16 and F16 tables.
#include <gtest/gtest.h>

#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"
#include "kiri/parallel/tp/embedding.h"
#include "kiri/parallel/tp/utils.h"
#include "tp/tp_util.h"

namespace kiri::parallel::tp {
namespace {

using comm::Communicator;
using testing::empty;
using testing::randn;

constexpr int64_t kVocab = 50, kPadded = 52, kB = 3, kT = 7, kC = 40;  // C: a 32-block and a tail

// Tokens over the whole real vocabulary, repeats included, 0 and 49 present.
Tensor make_tokens() {
  std::vector<int32_t> v = testing::random_ints(kB * kT, 0, kVocab, 11);
  v[0] = 0, v[1] = kVocab - 1, v[2] = kVocab - 1, v[5] = v[4];
  return testing::ints({kB, kT}, v);
}

void forward_matches_the_kernel(Communicator& tp, DType table_dtype) {
  testing::one_thread_per_rank();
  const VocabRange range = vocab_range(kPadded, tp.rank(), tp.size());
  Tensor wte = randn({kPadded, kC}, 1, 1.0, table_dtype), wpe = randn({kT, kC}, 2);
  Tensor tokens = make_tokens(), ref = empty({kB, kT, kC}), out = empty({kB, kT, kC});
  kernels::embedding_forward<float>(ref, tokens, wte, wpe);
  Tensor wte_local = wte.slice(range.start, range.end);
  vocab_parallel_embedding_forward(tp, out, tokens, wte_local, range.start);
  // The caller adds the positional embedding; then the rows are the kernel's bit for bit.
  float* o = out.data<float>();
  const float* p = wpe.data<float>();
  for (int64_t i = 0; i < kB * kT; ++i)
    for (int64_t c = 0; c < kC; ++c) o[i * kC + c] = o[i * kC + c] + p[(i % kT) * kC + c];
  for (int64_t i = 0; i < out.numel(); ++i)
    ASSERT_EQ(out.item(i), ref.item(i)) << "element " << i << " on rank " << tp.rank();
}
KIRI_TP_TESTS(TpEmbedding, ForwardEqualsTheKernel,
              [](Communicator& tp) { forward_matches_the_kernel(tp, DType::kF32); })
KIRI_TP_TESTS(TpEmbedding, Bf16ForwardEqualsTheKernel,
              [](Communicator& tp) { forward_matches_the_kernel(tp, DType::kBF16); })

// Each rank's dwte slice (accumulated onto a non-zero gradient) is the slice
// of the one-process gradient, bitwise, in every table dtype.
void backward_matches_the_kernel(Communicator& tp, DType grad_dtype) {
  testing::one_thread_per_rank();
  const VocabRange range = vocab_range(kPadded, tp.rank(), tp.size());
  Tensor tokens = make_tokens().view({kB * kT});
  Tensor dout = randn({kB * kT, kC}, 3);
  Tensor ref = randn({kPadded, kC}, 4, 0.1, grad_dtype);
  Tensor local = testing::clone(ref.slice(range.start, range.end));
  kernels::token_embedding_backward<float>(ref, dout, tokens);
  vocab_parallel_embedding_backward(local, dout, tokens, range.start);
  const Tensor ref_slice = ref.slice(range.start, range.end);
  for (int64_t i = 0; i < local.numel(); ++i)
    ASSERT_EQ(local.item(i), ref_slice.item(i)) << "element " << i << " on rank " << tp.rank();
}
KIRI_TP_TESTS(TpEmbedding, BackwardEqualsTheKernelSlice,
              [](Communicator& tp) { backward_matches_the_kernel(tp, DType::kF32); })
KIRI_TP_TESTS(TpEmbedding, Bf16BackwardEqualsTheKernelSlice,
              [](Communicator& tp) { backward_matches_the_kernel(tp, DType::kBF16); })
KIRI_TP_TESTS(TpEmbedding, F16BackwardEqualsTheKernelSlice,
              [](Communicator& tp) { backward_matches_the_kernel(tp, DType::kF16); })

// A token past the padded vocabulary and a vocab_start that is not this
// rank's are errors on every rank, before the all-reduce.
void embedding_errors(Communicator& tp) {
  const VocabRange range = vocab_range(kPadded, tp.rank(), tp.size());
  Tensor wte_local = randn({range.size(), kC}, 1), out = empty({1, 2, kC});
  Tensor bad = testing::ints({1, 2}, {3, static_cast<int32_t>(kPadded)});
  EXPECT_THROW(vocab_parallel_embedding_forward(tp, out, bad, wte_local, range.start), Error);
  Tensor good = testing::ints({1, 2}, {3, 4});
  EXPECT_THROW(vocab_parallel_embedding_forward(tp, out, good, wte_local, range.start + 1), Error);
  tp.barrier();
}
TEST(TpEmbedding, BadTokensAndStartsAreErrorsOnTwoRanks) {
  KIRI_RUN_RANKS(2, embedding_errors);
}

}  // namespace
}  // namespace kiri::parallel::tp
