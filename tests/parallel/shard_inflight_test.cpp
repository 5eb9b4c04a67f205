// ShardedDataParallel's reductions with a lagging peer: however far behind a
// peer is, a rank keeps at most kMaxInflightReductions units' reductions
// outstanding, none outlives the backward, and the sums are right (the cap's
// waits keep the collectives in the same order on every rank, hybrid included).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kiri/comm/local/local.h"
#include "kiri/parallel/shard/sharded.h"

namespace kiri::parallel {
namespace {

constexpr int kBlocks = 6;
constexpr int64_t kEmb = 1000, kBlock = 3000, kFinal = 64;  // elements per group

int64_t padded(int64_t n, int parts) {
  return (n + parts - 1) / parts * parts;
}

// One backward over the model's groups as GPT::backward_part calls the hooks,
// each group's gradient filled with `value`; `lag` sleeps before each unit ends.
void backward(ShardedDataParallel& sdp, std::vector<std::vector<nn::Parameter*>>& groups,
              float value, std::chrono::milliseconds lag) {
  const int last = static_cast<int>(groups.size()) - 1;
  auto run = [&](int g) {
    sdp.before_backward(g);
    for (nn::Parameter* p : groups[g]) p->grad.fill_(value);
    std::this_thread::sleep_for(lag);
    sdp.after_backward(g);
  };
  sdp.before_backward(0);  // the LM head writes the embeddings' gradient first
  for (nn::Parameter* p : groups[0]) p->grad.fill_(value);
  for (int g = last; g >= 1; --g) run(g);
  sdp.after_backward(0);
}

// Stage 2 over shard groups of `shard` ranks (replicated across the others).
void lagging_peer(int world_size, int shard) {
  comm::run_local(world_size, [&](comm::Communicator& world) {
    const int r = world.rank();
    std::unique_ptr<comm::Communicator> shard_group = world.split(r / shard, r, "shard");
    std::unique_ptr<comm::Communicator> replica_group =
        shard < world_size ? world.split(r % shard, r, "replica") : nullptr;
    std::vector<nn::Parameter> params(kBlocks + 2);
    std::vector<std::vector<nn::Parameter*>> groups;
    for (int g = 0; g < kBlocks + 2; ++g) {
      const int64_t n = g == 0 ? kEmb : g <= kBlocks ? kBlock : kFinal;
      params[g].name = "p" + std::to_string(g);
      params[g].shape = params[g].full = Shape({n});
      groups.push_back({&params[g]});
    }
    Allocator alloc;
    ShardedDataParallel sdp(groups, wrap_policy(kBlocks + 2, 1), *shard_group, replica_group.get(),
                            {.stage = 2, .dtype = DType::kF32}, alloc);
    sdp.zero_grad();
    // The last rank lags by far more than a unit's work takes.
    const auto lag = std::chrono::milliseconds(r == world_size - 1 ? 20 : 0);
    backward(sdp, groups, static_cast<float>(r + 1), lag);
    const MemoryStats st = alloc.stats();
    EXPECT_EQ(st.of(Category::kBuffers), 0) << "a reduction outlived the backward on rank " << r;
    // The embeddings' and the current unit's gradients, and the reductions in
    // flight: each a unit's gradient and its reduce-scatter output.
    const int64_t unit = padded(kBlock, shard);
    const int64_t bound =
        4 * (padded(kEmb, shard) + unit + kMaxInflightReductions * (unit + unit / shard));
    EXPECT_LE(st.peak_of(Category::kBuffers), bound) << "rank " << r;
    const float sum = static_cast<float>(world_size * (world_size + 1) / 2);
    for (const nn::ParameterSegment& s : sdp.segments())
      for (int64_t i = 0; i < s.grad.numel(); ++i)
        ASSERT_EQ(s.grad.data<float>()[i], sum) << s.param->name << " rank " << r;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::printf("%d ranks, shard %d, rank %d: buffers peak %lld of at most %lld bytes\n",
                world_size, shard, r, static_cast<long long>(st.peak_of(Category::kBuffers)),
                static_cast<long long>(bound));
  });
}

TEST(ShardInflight, LaggingPeerTwoRanks) {
  lagging_peer(2, 2);
}

TEST(ShardInflight, LaggingPeerHybrid) {
  lagging_peer(4, 2);
}

}  // namespace
}  // namespace kiri::parallel
