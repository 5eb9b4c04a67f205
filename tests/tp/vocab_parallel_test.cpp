// The vocabulary's two ends (parallel/tp/vocab_parallel.h) on 1, 2 and 4 ranks, with and
// without sequence parallelism, against the one-process kernels on the whole table: the
// rank's rows of every weight gradient equal its slice of the reference, the activations and
// the losses equal the reference's (their rows, under sequence parallelism), and one rank
// makes no collective at all (the bypass inside the layers).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kiri/kernels/ops.h"
#include "kiri/nn/module.h"
#include "kiri/nn/parameter.h"
#include "kiri/parallel/tp/vocab_parallel.h"
#include "tp/tp_util.h"

namespace kiri::parallel::tp {
namespace {

using comm::Communicator;
using testing::empty;
using testing::randn;

constexpr int64_t kB = 2, kT = 6, kN = kB * kT, kC = 8, kV = 50;  // V = 50: padded on 4 ranks

// Rows [r0, r0 + rows) of a [R, C] table, rows past its end zero (the padding).
Tensor rows_of(const Tensor& src, int64_t r0, int64_t rows) {
  Tensor t = empty({rows, src.dim(1)});
  t.zero_();
  for (int64_t i = 0; i < rows && r0 + i < src.dim(0); ++i)
    for (int64_t j = 0; j < src.dim(1); ++j)
      t.data<float>()[i * src.dim(1) + j] = src.data<float>()[(r0 + i) * src.dim(1) + j];
  return t;
}

int64_t collectives(Communicator& tp) {
  int64_t n = 0;
  for (comm::OpKind op :
       {comm::OpKind::kAllReduce, comm::OpKind::kAllGather, comm::OpKind::kReduceScatter})
    n += tp.stats(op).calls;
  return n;
}

void expect_near(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    EXPECT_NEAR(got.item(i), want.item(i), tol * std::max(1.0, std::fabs(want.item(i))))
        << what << " " << i;
}

void head_equals_one_process(Communicator& tp, bool sp) {
  testing::one_thread_per_rank();
  const TensorParallel par{&tp, sp};
  const VocabRows vr = vocab_rows(par, kV);
  Tensor w = randn({kV, kC}, 31), x = randn({kN, kC}, 32);
  std::vector<int32_t> t = testing::random_ints(kN, 0, static_cast<int32_t>(kV), 33);
  t[2] = -100;  // ignored
  Tensor targets = testing::ints({kN}, t);
  // The reference: the whole head on one process.
  namespace k = kiri::kernels;
  Tensor logits = empty({kN, kV}), loss = empty({kN}), lse = empty({kN}), dloss = empty({kN});
  k::gemm<float>(false, true, kN, kV, kC, 1, x.data<float>(), kC, w.data<float>(), kC, 0,
                 logits.data<float>(), kV);
  k::softmax_xent_forward<float>(loss, lse, logits, targets);
  dloss.fill_(0.25);
  k::softmax_xent_backward<float>(logits, lse, targets, dloss);
  Tensor dx = empty({kN, kC}), dw = empty({kV, kC});
  dx.zero_(), dw.zero_();
  k::gemm<float>(false, false, kN, kC, kV, 1, logits.data<float>(), kV, w.data<float>(), kC, 1,
                 dx.data<float>(), kC);
  k::gemm<float>(true, false, kV, kC, kN, 1, logits.data<float>(), kV, x.data<float>(), kC, 1,
                 dw.data<float>(), kC);
  // This rank: its rows of the head, its rows of x under sequence parallelism.
  nn::Parameter p;
  p.value = rows_of(w, vr.start, vr.rows);
  p.grad = empty({vr.rows, kC});
  p.grad.zero_();
  const int64_t mine = par.local_rows(kN), first = sp ? mine * tp.rank() : 0;
  nn::Context ctx(testing::allocator());
  const int64_t before = collectives(tp);
  VocabParallelHead<float> head(par, vr.start, kV);
  Tensor xs = head.every_row(ctx, rows_of(x, first, mine));
  Tensor saved, l = empty({kN}), s = empty({kN});
  Tensor lg = head.logits(ctx, xs, p.value, &saved);
  head.loss_forward(ctx, l, s, lg, targets);
  expect_near(l, loss, 1e-5, "loss");
  Tensor d = empty({kN});
  d.fill_(0.25);
  head.loss_backward(lg, s, targets, d);
  Tensor dxs = empty({kN, kC});
  dxs.zero_();
  head.logits_backward(ctx, lg, saved, p, dxs);
  Tensor got_dx = head.input_grad(ctx, dxs);
  expect_near(got_dx, rows_of(dx, first, mine), 1e-5, "dx");
  expect_near(p.grad, rows_of(dw, vr.start, vr.rows), 1e-5, "dw");
  if (tp.size() == 1) {
    EXPECT_EQ(collectives(tp), before) << "one rank bypasses every collective";
  }
  // The loss's 3 all-reduces, then f's backward (an all-reduce), or under sequence parallelism
  // the input's all-gather and its backward's reduce-scatter.
  if (tp.size() > 1) {
    EXPECT_EQ(collectives(tp) - before, sp ? 5 : 4);
  }
}

void embedding_equals_one_process(Communicator& tp, bool sp) {
  testing::one_thread_per_rank();
  const TensorParallel par{&tp, sp};
  const VocabRows vr = vocab_rows(par, kV);
  Tensor wte = randn({kV, kC}, 41), wpe = randn({kT, kC}, 42);
  Tensor tokens =
      testing::ints({kB, kT}, testing::random_ints(kN, 0, static_cast<int32_t>(kV), 43));
  namespace k = kiri::kernels;
  Tensor ref = empty({kB, kT, kC}), dout = randn({kN, kC}, 44), dwte = empty({kV, kC});
  k::embedding_forward<float>(ref, tokens, wte, wpe);
  dwte.zero_();
  k::token_embedding_backward<float>(dwte, dout, tokens.view({kN}));
  nn::Context ctx(testing::allocator());
  VocabParallelEmbedding<float> emb(par, vr.start);
  const int64_t mine = par.local_rows(kN), first = sp ? mine * tp.rank() : 0;
  Tensor rows = emb.forward(ctx, tokens, rows_of(wte, vr.start, vr.rows), wpe);
  // Exactly one rank's term of each sum is non-zero: bitwise the lookup.
  expect_near(rows, rows_of(ref.view({kN, kC}), first, mine), 0.0, "rows");
  Tensor all = emb.every_row_grad(ctx, rows_of(dout, first, mine), kN);
  expect_near(all, dout, 0.0, "every row's gradient");
  Tensor g = empty({vr.rows, kC});
  g.zero_();
  emb.token_backward(g, all, tokens.view({kN}));
  expect_near(g, rows_of(dwte, vr.start, vr.rows), 0.0, "dwte");
}

KIRI_TP_TESTS(VocabParallelHead, EqualsOneProcess,
              [](Communicator& tp) { head_equals_one_process(tp, false); })
KIRI_TP_TESTS(VocabParallelHead, SequenceParallelEqualsOneProcess,
              [](Communicator& tp) { head_equals_one_process(tp, true); })
KIRI_TP_TESTS(VocabParallelEmbedding, EqualsOneProcess,
              [](Communicator& tp) { embedding_equals_one_process(tp, false); })
KIRI_TP_TESTS(VocabParallelEmbedding, SequenceParallelEqualsOneProcess,
              [](Communicator& tp) { embedding_equals_one_process(tp, true); })

}  // namespace
}  // namespace kiri::parallel::tp
