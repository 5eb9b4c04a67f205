// The tp mappings against closed forms: inputs are functions of the rank and
// the position, so every output element has a formula.
#include <gtest/gtest.h>

#include "kiri/base/error.h"
#include "kiri/parallel/tp/mappings.h"
#include "tp/tp_util.h"

namespace kiri::parallel::tp {
namespace {

using comm::Communicator;
using testing::empty;

constexpr int64_t kRows = 8, kCols = 5;  // N divisible by 1, 2 and 4

// (rank + 1) * (i + 1) at flat index i.
Tensor rank_valued(const Shape& shape, int rank) {
  Tensor t = empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = (rank + 1.0f) * (i + 1.0f);
  return t;
}

// sum over ranks of (rank + 1) = P (P + 1) / 2.
double rank_sum(int P) {
  return P * (P + 1) / 2.0;
}

// (rank + 1) (i % 16 + 1): every partial sum a small integer, exact in
// bf16 too (which MPI rounds at each step of its reduction tree).
Tensor small_rank_valued(const Shape& shape, int rank, DType dtype) {
  Tensor t = empty(shape, DType::kF64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = (rank + 1.0) * (i % 16 + 1.0);
  Tensor out = empty(shape, dtype);
  out.copy_from(t);
  return out;
}

void all_reduce_mappings(Communicator& tp) {
  const int P = tp.size();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor grad = small_rank_valued({kRows, kCols}, tp.rank(), dt);
    CopyToRegion::backward(tp, grad);  // f: sum of the gradients
    Tensor x = small_rank_valued({3, 7}, tp.rank(), dt);
    ReduceFromRegion::forward(tp, x);  // g: sum of the partial outputs
    for (int64_t i = 0; i < grad.numel(); ++i)
      EXPECT_EQ(grad.item(i), rank_sum(P) * (i % 16 + 1)) << dtype_name(dt);
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(x.item(i), rank_sum(P) * (i % 16 + 1)) << dtype_name(dt);
  }
}
KIRI_TP_TESTS(TpMappings, CopyAndReduceSumOverRanks, all_reduce_mappings)

// local_r[k, c] = 1000 r + 10 k + c, so full[n, c] = 1000 (n / rows) + 10 (n % rows) + c.
void gather_from_sequence(Communicator& tp) {
  const int P = tp.size(), r = tp.rank();
  const int64_t rows = kRows / P;
  Tensor local = empty({rows, kCols}), full = empty({kRows, kCols});
  for (int64_t k = 0; k < rows; ++k)
    for (int64_t c = 0; c < kCols; ++c) local.data<float>()[k * kCols + c] = 1000 * r + 10 * k + c;
  GatherFromSequence::forward(tp, local, full);
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t c = 0; c < kCols; ++c)
      EXPECT_EQ(full.item(n * kCols + c), 1000 * (n / rows) + 10 * (n % rows) + c);
  // Backward: dfull_s = (s + 1) (i + 1), so dlocal_r = P (P + 1) / 2 (r rows kCols + i + 1).
  Tensor dfull = rank_valued({kRows, kCols}, r), dlocal = empty({rows, kCols});
  GatherFromSequence::backward(tp, dfull, dlocal);
  for (int64_t i = 0; i < dlocal.numel(); ++i)
    EXPECT_EQ(dlocal.item(i), rank_sum(P) * (r * rows * kCols + i + 1));
}
KIRI_TP_TESTS(TpMappings, GatherFromSequence, gather_from_sequence)

void reduce_scatter_to_sequence(Communicator& tp) {
  const int P = tp.size(), r = tp.rank();
  const int64_t rows = kRows / P;
  // Forward: full_s = (s + 1) (i + 1) reduces to block r of P (P + 1) / 2 (i + 1).
  Tensor full = rank_valued({kRows, kCols}, r), local = empty({rows, kCols});
  ReduceScatterToSequence::forward(tp, full, local);
  for (int64_t i = 0; i < local.numel(); ++i)
    EXPECT_EQ(local.item(i), rank_sum(P) * (r * rows * kCols + i + 1));
  // Backward: dlocal_r = 100 r + i stacks in rank order.
  Tensor dlocal = empty({rows, kCols}), dfull = empty({kRows, kCols});
  for (int64_t i = 0; i < dlocal.numel(); ++i) dlocal.data<float>()[i] = 100 * r + i;
  ReduceScatterToSequence::backward(tp, dlocal, dfull);
  const int64_t per = rows * kCols;
  for (int64_t j = 0; j < dfull.numel(); ++j) EXPECT_EQ(dfull.item(j), 100 * (j / per) + j % per);
}
KIRI_TP_TESTS(TpMappings, ReduceScatterToSequence, reduce_scatter_to_sequence)

// 6 rows over 4 ranks: a kConfig error naming the numbers, on every rank,
// before any collective; a local block of the wrong size is an argument error.
void sequence_errors(Communicator& tp) {
  Tensor full = empty({6, kCols}), local = empty({2, kCols});
  try {
    GatherFromSequence::forward(tp, local, full);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.message(),
              "gather_from_sequence_forward: sequence rows over tp: 6 is not "
              "divisible by 4");
  }
  Tensor full8 = empty({kRows, kCols}), wrong = empty({3, kCols});
  try {
    ReduceScatterToSequence::forward(tp, full8, wrong);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(e.message().find("is not block"), std::string::npos) << e.message();
  }
  tp.barrier();  // the ranks are still in step
}
TEST(TpMappings, SequenceSizesAreCheckedOnFourRanks) {
  KIRI_RUN_RANKS(4, sequence_errors);
}

}  // namespace
}  // namespace kiri::parallel::tp
