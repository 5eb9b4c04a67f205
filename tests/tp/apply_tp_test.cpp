// apply_tp on layers built whole (parallel/tp/layers.h): each parameter keeps this rank's part
// of the whole, the one-process values of that part give the slice of the one-process output,
// and a cut after the parameters are bound, a second cut, or a dimension tp does not divide
// is a named error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiri/nn/module.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/parallel/tp/layers.h"
#include "temp_dir.h"
#include "tp/tp_util.h"

namespace kiri::parallel::tp {
namespace {

using comm::Communicator;
using kiri::testing::error_of;
using testing::allocator;
using testing::randn;

constexpr int64_t kIn = 8, kOut = 12, kRows = 3;

// Fills every parameter of `cut` with the values its elements have in `whole` (the same
// names, bound), through the runs of its part.
void copy_parts(nn::Module& cut, nn::Module& whole) {
  std::vector<nn::Parameter*> wp = whole.parameters();
  std::vector<nn::Parameter*> cp = cut.parameters();
  ASSERT_EQ(wp.size(), cp.size());
  for (size_t i = 0; i < cp.size(); ++i) {
    ASSERT_EQ(cp[i]->name, wp[i]->name);
    for (const nn::ElementRun& r : nn::element_runs(*cp[i]))
      for (int64_t e = 0; e < r.length; ++e)
        cp[i]->value.data<float>()[r.local + e] = wp[i]->value.data<float>()[r.global + e];
  }
}

void column_keeps_its_columns(Communicator& group) {
  testing::one_thread_per_rank();
  const int P = group.size(), r = group.rank();
  const TensorParallel tp{&group, false};
  ColumnParallelLinear<float> whole("attn.c_attn", kIn, kOut, 0.02, 3);
  ColumnParallelLinear<float> cut("attn.c_attn", kIn, kOut, 0.02, 3);
  cut.apply_tp(tp);
  nn::Parameter& w = cut.weight();
  EXPECT_EQ(w.shape, Shape({kIn, kOut / P}));
  EXPECT_EQ(w.full, Shape({kIn, kOut}));
  if (P > 1) {
    EXPECT_EQ(w.tp.dim, 1);
    EXPECT_EQ(w.tp.parts, P);
    EXPECT_EQ(w.tp.index, r);
    EXPECT_EQ(w.tp.blocks, 3);
  } else {
    EXPECT_EQ(w.tp.dim, -1);
  }
  EXPECT_EQ(cut.cols(), kOut / P);
  nn::ParameterStore ws(whole.parameters(), DType::kF32, allocator());
  nn::ParameterStore cs(cut.parameters(), DType::kF32, allocator());
  for (nn::Parameter* p : whole.parameters()) p->value.copy_from(randn(p->shape, 3));
  copy_parts(cut, whole);
  nn::Context ctx(allocator());
  const Tensor x = randn({kRows, kIn}, 5);
  const Tensor yw = whole.forward(ctx, x);  // [N, out]
  const Tensor yc = cut.forward(ctx, x);    // [N, out/P]
  // Rank r's columns: its part of each of the 3 blocks.
  const int64_t block = kOut / 3, part = block / P;
  for (int64_t n = 0; n < kRows; ++n)
    for (int64_t j = 0; j < kOut / P; ++j) {
      const int64_t g = (j / part) * block + r * part + j % part;
      EXPECT_EQ(yc.data<float>()[n * (kOut / P) + j], yw.data<float>()[n * kOut + g]);
    }
}
KIRI_TP_TESTS(ApplyTp, ColumnParallelLayerKeepsItsColumnsOfEachBlock, column_keeps_its_columns)

void row_keeps_its_rows(Communicator& group) {
  const int P = group.size(), r = group.rank();
  RowParallelLinear<float> cut("mlp.c_proj", kOut, kIn, 0.02);
  cut.apply_tp({&group, false});
  std::vector<nn::Parameter*> ps = cut.parameters();
  ASSERT_EQ(ps.size(), 2u);
  EXPECT_EQ(ps[0]->shape, Shape({kOut / P, kIn}));
  EXPECT_EQ(ps[0]->full, Shape({kOut, kIn}));
  EXPECT_EQ(ps[0]->tp.dim, P > 1 ? 0 : -1);
  EXPECT_EQ(ps[0]->tp.index, P > 1 ? r : 0);
  EXPECT_EQ(ps[1]->shape, Shape({kIn}));  // the bias stays whole
  EXPECT_EQ(ps[1]->tp.dim, -1);
}
KIRI_TP_TESTS(ApplyTp, RowParallelLayerKeepsItsRowsAndTheWholeBias, row_keeps_its_rows)

void refuses_bound_twice_and_indivisible(Communicator& group) {
  const int P = group.size();
  if (P == 1) {  // one rank: nothing is cut, nothing can be refused
    ColumnParallelLinear<float> l("c", kIn, kOut, 0.02);
    nn::ParameterStore s(l.parameters(), DType::kF32, allocator());
    EXPECT_EQ(error_of([&] { l.apply_tp({&group, false}); }), "");
    return;
  }
  {
    ColumnParallelLinear<float> bound("h.0.mlp.c_fc", kIn, kOut, 0.02);
    nn::ParameterStore s(bound.parameters(), DType::kF32, allocator());
    ErrorKind kind{};
    const std::string e = error_of([&] { bound.apply_tp({&group, false}); }, &kind);
    EXPECT_NE(e.find("h.0.mlp.c_fc.weight: tensor parallelism is applied before the parameters "
                     "are bound"),
              std::string::npos)
        << e;
    EXPECT_EQ(kind, ErrorKind::kInternal);
  }
  {
    RowParallelLinear<float> twice("h.0.mlp.c_proj", kOut, kIn, 0.02);
    twice.apply_tp({&group, false});
    const std::string e = error_of([&] { twice.apply_tp({&group, false}); });
    EXPECT_NE(e.find("tensor parallelism is applied once"), std::string::npos) << e;
  }
  {
    ColumnParallelLinear<float> odd("h.0.attn.c_attn", kIn, 3 * (2 * P + 1), 0.02, 3);
    ErrorKind kind{};
    const std::string e = error_of([&] { odd.apply_tp({&group, false}); }, &kind);
    EXPECT_NE(
        e.find("h.0.attn.c_attn: " + std::to_string(3 * (2 * P + 1)) +
               " output columns (3 blocks) do not split over parallel.tp = " + std::to_string(P)),
        std::string::npos)
        << e;
    EXPECT_EQ(kind, ErrorKind::kConfig);
  }
}
KIRI_TP_TESTS(ApplyTp, RefusesBoundParametersASecondCutAndIndivisibleWidths,
              refuses_bound_twice_and_indivisible)

}  // namespace
}  // namespace kiri::parallel::tp
