#include "kiri/parallel/dims.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/comm/local/local.h"

namespace kiri::parallel {
namespace {

// tp innermost, then dp, then pp; each dimension's group holds the right ranks.
TEST(ParallelDims, CoordinatesAndGroupsFollowMegatronOrder) {
  std::mutex mu;
  std::set<std::string> seen;
  comm::run_local(8, [&](comm::Communicator& world) {
    ParallelDims m(world, {2, 2, 2});
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

// Rank r's world rank summed over a group: which ranks it holds, in one number.
double group_sum(comm::Communicator& c, int r) {
  Allocator alloc;
  Tensor t = Tensor::empty({1}, DType::kF64, Category::kOther, alloc);
  t.data<double>()[0] = r;
  c.all_reduce(t, comm::ReduceOp::kSum);
  return t.data<double>()[0];
}

// dp 4 x pp 2: hybrid sharding's blocks of 2 dp ranks and their replicas, the embedding group
// of the first and last stage, and every group listed once.
TEST(ParallelDims, HybridAndEmbeddingGroupsHoldTheRightRanks) {
  comm::run_local(8, [&](comm::Communicator& world) {
    ParallelDims d(world, {4, 1, 2});
    const int r = world.rank(), stage = r / 4, i = r % 4;  // dp index i within stage
    comm::Communicator& shard = d.shard_group(2);
    EXPECT_EQ(&shard, &d.shard_group(2));  // made once
    EXPECT_EQ(shard.size(), 2);
    EXPECT_EQ(shard.name(), "dp_shard");
    // Blocks {0,1}, {2,3} of the dp ranks; replicas {0,2}, {1,3}.
    EXPECT_EQ(group_sum(shard, r), 2 * (stage * 4 + i / 2 * 2) + 1);
    comm::Communicator& replicas = d.replica_group(2);
    EXPECT_EQ(group_sum(replicas, r), 2 * (stage * 4 + i % 2) + 2);
    comm::Communicator* e = d.embedding_group();
    ASSERT_NE(e, nullptr);                   // pp 2: every rank is on the first or the last stage
    EXPECT_EQ(group_sum(*e, r), 2 * i + 4);  // rank i and i + 4
    EXPECT_EQ(d.groups().size(), 6u);        // world, dp, pp, shard, replica, embedding
    try {
      d.shard_group(4);
      ADD_FAILURE() << "a shard group of all of dp is not hybrid sharding";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("must divide dp = 4 and be smaller than it"),
                std::string::npos)
          << err.what();
    }
  });
}

// The middle stages of pp 3 are in no embedding group.
TEST(ParallelDims, MiddleStagesHaveNoEmbeddingGroup) {
  comm::run_local(3, [&](comm::Communicator& world) {
    ParallelDims d(world, {1, 1, 3});
    comm::Communicator* e = d.embedding_group();
    if (world.rank() == 1) {
      EXPECT_EQ(e, nullptr);
    } else {
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->size(), 2);
    }
  });
}

// The host map: ranks on threads stand for hosts by the keys they are given.
TEST(ParallelDims, TheHostMapNumbersHostsInOrderOfFirstAppearance) {
  const std::vector<uint64_t> keys = {7, 7, 3, 3, 3, 9};
  std::mutex mu;
  std::vector<HostMap> seen(keys.size());
  comm::run_local(6, [&](comm::Communicator& world) {
    ParallelDims d(world, {6, 1, 1}, keys[static_cast<size_t>(world.rank())]);
    const HostMap h = d.hosts();
    std::lock_guard<std::mutex> lock(mu);
    seen[static_cast<size_t>(world.rank())] = h;
  });
  for (const HostMap& h : seen) {
    EXPECT_EQ(h.host_of, (std::vector<int>{0, 0, 1, 1, 1, 2}));
    EXPECT_EQ(h.hosts, 3);
  }
  EXPECT_EQ(seen[3].local_rank, 1);
  EXPECT_EQ(seen[3].local_size, 3);
  EXPECT_EQ(seen[5].local_rank, 0);
  EXPECT_EQ(seen[5].local_size, 1);
  // Each host's name is its first rank's hostname (threads: all this machine's).
  char name[256] = {0};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_EQ(seen[0].names, (std::vector<std::string>(3, name)));
  std::string by_host;
  comm::run_local(6, [&](comm::Communicator& world) {
    ParallelDims d(world, {6, 1, 1}, keys[static_cast<size_t>(world.rank())]);
    d.hosts();
    if (world.rank() == 0) by_host = d.ranks_by_host();
  });
  EXPECT_EQ(by_host,
            std::string(name) + ": ranks 0-1; " + name + ": ranks 2-4; " + name + ": rank 5");
  // By default the hostname: ranks on threads share one host.
  comm::run_local(2, [&](comm::Communicator& world) {
    ParallelDims d(world, {2, 1, 1});
    EXPECT_EQ(d.hosts().hosts, 1);
    EXPECT_EQ(d.hosts().local_size, 2);
  });
}

// Ranks placed round robin (world ranks 0 and 2 on host 1, 1 and 3 on host 2): the mesh
// orders them by host, so tp 2 pairs world ranks 0 with 2 and 1 with 3.
TEST(ParallelDims, RanksPlacedRoundRobinAreOrderedByHost) {
  const std::vector<uint64_t> keys = {1, 2, 1, 2};
  std::mutex mu;
  std::vector<std::string> coords(4);
  std::vector<int> tp_sum(4);
  comm::run_local(4, [&](comm::Communicator& world) {
    ParallelDims d(world, {2, 2, 1}, keys[static_cast<size_t>(world.rank())]);
    Allocator a;
    Tensor t = Tensor::empty({1}, DType::kF32, Category::kOther, a);
    t.data<float>()[0] = static_cast<float>(world.rank());
    d.tp().all_reduce(t, comm::ReduceOp::kSum);
    std::lock_guard<std::mutex> lock(mu);
    coords[static_cast<size_t>(world.rank())] = d.coordinates();
    tp_sum[static_cast<size_t>(world.rank())] = static_cast<int>(t.data<float>()[0]);
  });
  EXPECT_EQ(coords[0], "rank 0 = (dp 0, tp 0, pp 0)");
  EXPECT_EQ(coords[2], "rank 2 = (dp 0, tp 1, pp 0)");
  EXPECT_EQ(coords[1], "rank 1 = (dp 1, tp 0, pp 0)");
  EXPECT_EQ(coords[3], "rank 3 = (dp 1, tp 1, pp 0)");
  EXPECT_EQ(tp_sum, (std::vector<int>{2, 4, 2, 4}));  // {0, 2} and {1, 3}
}

// 2 hosts x 2 ranks: ranks placed host by host keep tp (innermost) inside a host and dp across;
// placed round robin, the mesh orders them by host and keeps the same groups inside hosts.
// Where hosts' rank counts do not allow it (3 + 1 ranks for tp 2), tp crosses and is named.
TEST(ParallelDims, TheHostSummarySaysWhichGroupsCrossHosts) {
  std::mutex mu;
  std::vector<std::string> summary(4), across(4), hybrid(4);
  auto run = [&](const std::vector<uint64_t>& keys, MeshShape shape, int shard) {
    comm::run_local(4, [&](comm::Communicator& world) {
      ParallelDims d(world, shape, keys[static_cast<size_t>(world.rank())]);
      d.hosts();
      std::string a;
      for (const std::string& g : d.groups_across_hosts(shard)) a += g + " ";
      std::lock_guard<std::mutex> lock(mu);
      summary[static_cast<size_t>(world.rank())] = d.host_summary(shard);
      across[static_cast<size_t>(world.rank())] = a;
    });
  };
  run({1, 1, 2, 2}, {2, 2, 1}, 0);
  EXPECT_EQ(summary[0],
            "2 hosts (host 0: ranks 0-1; host 1: ranks 2-3); tp inside hosts, dp across hosts");
  EXPECT_EQ(across[3], "");
  run({1, 2, 1, 2}, {2, 2, 1}, 0);
  EXPECT_EQ(summary[0],
            "2 hosts (host 0: ranks 0, 2; host 1: ranks 1, 3); tp inside hosts, dp across hosts "
            "(the launcher placed ranks round robin: the mesh orders them by host)");
  EXPECT_EQ(across[1], "");
  run({1, 1, 1, 2}, {2, 2, 1}, 0);
  EXPECT_EQ(summary[0],
            "2 hosts (host 0: ranks 0-2; host 1: ranks 3); tp across hosts, dp across hosts");
  EXPECT_EQ(across[1], "tp ");
  // Hybrid sharding over dp 4 in shard groups of 2: inside hosts when placed host by host.
  run({1, 1, 2, 2}, {4, 1, 1}, 2);
  EXPECT_EQ(
      summary[2],
      "2 hosts (host 0: ranks 0-1; host 1: ranks 2-3); shard group inside hosts, dp across hosts");
  run({1, 2, 1, 2}, {4, 1, 1}, 2);
  EXPECT_EQ(across[0], "");
  run({1, 1, 1, 2}, {4, 1, 1}, 2);
  EXPECT_EQ(across[0], "shard ");
  // pp 2 across hosts, tp 2 inside.
  run({1, 1, 2, 2}, {1, 2, 2}, 0);
  EXPECT_EQ(summary[0],
            "2 hosts (host 0: ranks 0-1; host 1: ranks 2-3); tp inside hosts, pp across hosts");
  run({1, 1, 1, 1}, {4, 1, 1}, 0);
  EXPECT_EQ(summary[0], "1 host (host 0: ranks 0-3)");
}

TEST(ParallelDims, ADegreeBelowOneOrAWrongWorldIsNamed) {
  comm::run_local(2, [&](comm::Communicator& world) {
    try {
      ParallelDims d(world, {1, 1, 1});
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find("mesh dp 1 x tp 1 x pp 1 needs 1 ranks, the world has 2"),
          std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace kiri::parallel
