#include "kiri/parallel/mesh.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "kiri/comm/local/local.h"

namespace kiri::parallel {
namespace {

// tp innermost, then dp, then pp; each dimension's group holds the right ranks.
TEST(Mesh, CoordinatesAndGroupsFollowMegatronOrder) {
  std::mutex mu;
  std::set<std::string> seen;
  comm::run_local(8, [&](comm::Communicator& world) {
    Mesh m(world, {2, 2, 2});
    const int r = world.rank();
    EXPECT_EQ(m.tp_index(), r % 2);
    EXPECT_EQ(m.dp_index(), (r / 2) % 2);
    EXPECT_EQ(m.pp_index(), r / 4);
    EXPECT_EQ(m.tp().size(), 2);
    EXPECT_EQ(m.dp().size(), 2);
    EXPECT_EQ(m.pp().size(), 2);
    // Sum world ranks over each group: tp peers differ by 1, dp by 2, pp by 4.
    auto group_sum = [&](comm::Communicator& c) {
      Allocator alloc;
      Tensor t = Tensor::empty({1}, DType::kF64, Category::kOther, alloc);
      t.data<double>()[0] = r;
      c.all_reduce(t, comm::ReduceOp::kSum);
      return t.data<double>()[0];
    };
    EXPECT_EQ(group_sum(m.tp()), 2 * (r - r % 2) + 1);
    EXPECT_EQ(group_sum(m.dp()), 2 * (r - (r / 2) % 2 * 2) + 2);
    EXPECT_EQ(group_sum(m.pp()), 2 * (r % 4) + 4);
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(m.coordinates());
  });
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_TRUE(seen.count("rank 5 = (dp 0, tp 1, pp 1)"));
}

}  // namespace
}  // namespace kiri::parallel
