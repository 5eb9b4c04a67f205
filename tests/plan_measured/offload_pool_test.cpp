// The planner's offload tiers (plan::offload_pool_bytes, plan::apply_offload) against the
// optimizer's real StateStore on swap files: the allocator's buffers (the staging pool), its
// optimizer_states in memory (none) and on the NVMe tier, to the byte, for fp32 (m, v) and
// 16-bit (master, m, v) states, small and large shards and several pools.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "kiri/offload/swap_space.h"
#include "kiri/optim/state_store.h"
#include "kiri/plan/memory.h"

namespace kiri {
namespace {

struct PoolCase {
  int64_t numel;
  bool master;  // a 16-bit run keeps fp32 master weights
  int buffer_count;
  int64_t buffer_bytes, block_size;
  std::vector<int64_t> unit_starts;
};

TEST(PlanOffloadMeasured, PoolAndNvmeBytesEqualTheStateStores) {
  namespace fs = std::filesystem;
  const std::string dir =
      (fs::temp_directory_path() / ("kiri_plan_pool_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const std::vector<PoolCase> cases = {
      {118592, false, 4, 64 << 20, 1 << 20, {}},                // tiny model, fp32
      {118592, true, 4, 64 << 20, 1 << 20, {0, 18496, 68480}},  // tiny, bf16, units
      {3 << 20, true, 2, 1 << 20, 64 << 10, {}},   // larger than a chunk: chunk-sized buffers
      {1000003, false, 3, 3 << 20, 4096, {0, 7}},  // odd sizes, small blocks
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& k = cases[i];
    Allocator alloc;
    plan::Layout l;
    l.dtype = k.master ? plan::Precision::kBf16 : plan::Precision::kFp32;
    l.offload.optimizer = plan::OffloadTarget::kNvme;
    l.offload.buffer_count = k.buffer_count;
    l.offload.buffer_bytes = k.buffer_bytes;
    l.offload.block_size = k.block_size;
    const double states = k.master ? 3 : 2;
    // The planner: the states as in memory, then moved.
    plan::MemoryBreakdown m;
    m.optimizer_states = 4 * states * static_cast<double>(k.numel);
    plan::apply_offload(m, l, static_cast<double>(k.numel), 0);
    {
      offload::SwapOptions so;
      so.dir = dir + "/case" + std::to_string(i);
      so.io.block_size = k.block_size;
      offload::SwapSpace swap(so, alloc);
      optim::StateOffload o;
      o.swap = &swap;
      o.unit_starts = k.unit_starts;
      o.buffer_count = k.buffer_count;
      o.buffer_bytes = k.buffer_bytes;
      optim::StateStore store(k.numel, k.master, o, alloc);
      const MemoryStats s = alloc.stats();
      EXPECT_EQ(s.of(Category::kOptimizerStates), 0) << i;
      EXPECT_EQ(static_cast<double>(s.of(Category::kOptimizerStates)), m.optimizer_states) << i;
      EXPECT_EQ(static_cast<double>(s.of(Category::kBuffers)), m.buffers) << i;
      EXPECT_EQ(static_cast<double>(s.nvme_of(Category::kOptimizerStates)), m.nvme.optimizer_states)
          << i;
      EXPECT_EQ(static_cast<double>(s.nvme_of(Category::kBuffers)), 0) << i;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiri
