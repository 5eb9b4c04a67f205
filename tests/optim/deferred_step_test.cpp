// The optimizer's pass in pieces (StateStore::begin_pass / advance_pass / finish_pass) and the
// deferred AdamW step built on it (overlap across steps under offload): advancing to a state
// element runs the chunks before it (exactly those, or also later ones whose reads have
// landed), and the deferred step is bitwise the step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/offload/swap_space.h"
#include "kiri/optim/adamw.h"
#include "temp_dir.h"

namespace kiri::optim {
namespace {

namespace fs = std::filesystem;

using kiri::testing::temp_dir;

offload::SwapOptions swap_options(const std::string& dir) {
  offload::SwapOptions so;
  so.dir = dir;
  so.io.block_size = 4096;
  return so;
}

// 3 units of 3000, 5000 and 2000 elements; chunks of 1024 (4 KiB blocks, one state).
constexpr int64_t kNumel = 10000;
const std::vector<int64_t> kUnits = {0, 3000, 8000};

StateOffload small_chunks(offload::SwapSpace& swap, int buffers) {
  StateOffload o;
  o.swap = &swap;
  o.unit_starts = kUnits;
  o.buffer_count = buffers;
  o.buffer_bytes = 2 * 1024 * 4;  // m and v (fp32 values: no master): 1024 elements a chunk
  return o;
}

TEST(StatePass, AdvanceRunsExactlyTheChunksBeforeTheEnd) {
  const std::string dir = temp_dir("kiri_state_pass_");
  {
    Allocator alloc;
    offload::SwapSpace swap(swap_options(dir), alloc);
    StateStore store(kNumel, false, small_chunks(swap, 4), alloc);
    std::vector<int64_t> begins;
    store.begin_pass(kAllStates, kAllStates, [&](StateStore::Chunk& c) {
      begins.push_back(c.begin);
      float* m = c.state[1].data<float>();
      for (int64_t i = 0; i < c.end - c.begin; ++i) m[i] += static_cast<float>(c.begin + i);
    });
    EXPECT_TRUE(store.pass_active());
    EXPECT_TRUE(begins.empty());             // begin_pass only starts reads
    store.advance_pass(3000, false, false);  // unit 0: chunks at 0, 1024, 2048
    EXPECT_EQ(begins, (std::vector<int64_t>{0, 1024, 2048}));
    store.advance_pass(3000, true, false);  // nothing more to run; its writes waited for
    EXPECT_EQ(begins.size(), 3u);
    store.advance_pass(3001, false, false);  // the first chunk of unit 1 (never across a unit)
    EXPECT_EQ(begins.back(), 3000);
    Tensor x = Tensor::empty({10}, DType::kF32, Category::kOther, alloc);
    EXPECT_THROW(store.read(State::kExpAvg, 0, x), Error);  // the staging buffers are in use
    store.finish_pass();
    EXPECT_FALSE(store.pass_active());
    // Every chunk once, in order: unit 0 in 3, unit 1 (5000) in 5, unit 2 (2000) in 2.
    EXPECT_EQ(begins,
              (std::vector<int64_t>{0, 1024, 2048, 3000, 4024, 5048, 6072, 7096, 8000, 9024}));
    Tensor all = Tensor::empty({kNumel}, DType::kF32, Category::kOther, alloc);
    store.read(State::kExpAvg, 0, all);
    for (int64_t i = 0; i < kNumel; ++i)
      ASSERT_EQ(all.data<float>()[i], static_cast<float>(i)) << i;
  }
  fs::remove_all(dir);
}

// With run_ready, a chunk whose reads have landed runs ahead of need.
TEST(StatePass, ChunksWhoseReadsLandedRunAhead) {
  const std::string dir = temp_dir("kiri_state_pass_ahead_");
  {
    Allocator alloc;
    offload::SwapSpace swap(swap_options(dir), alloc);
    StateStore store(kNumel, false, small_chunks(swap, 4), alloc);
    std::vector<int64_t> begins;
    store.begin_pass(kAllStates, kAllStates,
                     [&](StateStore::Chunk& c) { begins.push_back(c.begin); });
    // begin_pass read chunks 0, 1 and 2 (two ahead); give them time to land.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    store.advance_pass(1, false);  // needs chunk 0 only
    ASSERT_GE(begins.size(), 2u) << "chunk 1 had landed and ran ahead";
    const std::vector<int64_t> all = {0, 1024, 2048, 3000, 4024, 5048, 6072, 7096, 8000, 9024};
    EXPECT_TRUE(std::equal(begins.begin(), begins.end(), all.begin())) << "in order";
    store.finish_pass();
    EXPECT_EQ(begins, all);
  }
  fs::remove_all(dir);
}

TEST(StatePass, ErrorInThePassEndsItAndTheNextPassRuns) {
  const std::string dir = temp_dir("kiri_state_pass_err_");
  {
    Allocator alloc;
    offload::SwapSpace swap(swap_options(dir), alloc);
    StateStore store(kNumel, false, small_chunks(swap, 3), alloc);
    int calls = 0;
    store.begin_pass(kAllStates, kAllStates, [&](StateStore::Chunk&) {
      if (++calls == 2) KIRI_RAISE(kData, "injected");
    });
    store.advance_pass(1024, false, false);  // chunk 0 only
    EXPECT_THROW(store.advance_pass(kNumel, false), Error);
    EXPECT_FALSE(store.pass_active());  // drained and ended
    int again = 0;
    store.for_each_chunk(kAllStates, kAllStates, [&](StateStore::Chunk&) { ++again; });
    EXPECT_EQ(again, 10);
    store.begin_pass(0, 0, [](StateStore::Chunk&) {});
    EXPECT_THROW(store.begin_pass(0, 0, [](StateStore::Chunk&) {}), Error) << "one pass at a time";
    store.finish_pass();
  }
  fs::remove_all(dir);
}

// Two parameters per unit, bf16 values in memory (fp32 master, m, v offloaded).
struct Model {
  std::vector<std::unique_ptr<nn::Parameter>> params;
  Tensor values, grads;  // [kNumel] BF16
  std::vector<Segment> segments;
  Model(Allocator& alloc, uint32_t seed) {
    values = Tensor::empty({kNumel}, DType::kBF16, Category::kParameters, alloc);
    grads = Tensor::empty({kNumel}, DType::kBF16, Category::kGradients, alloc);
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.0f, 1.0f);
    Tensor g = Tensor::empty({kNumel}, DType::kF32, Category::kOther, alloc);
    for (int64_t i = 0; i < kNumel; ++i) g.data<float>()[i] = n(rng);
    grads.copy_from(g);
    const std::vector<int64_t> cuts = {0, 1000, 3000, 6500, 8000, 9000, kNumel};
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      auto p = std::make_unique<nn::Parameter>();
      p->name = "p" + std::to_string(k);
      p->shape = Shape{cuts[k + 1] - cuts[k]};
      p->weight_decay = k % 2 == 0;
      p->init = {nn::InitKind::kNormal, 0.02};
      const int64_t len = cuts[k + 1] - cuts[k];
      segments.push_back(
          {p.get(), 0, cuts[k], values.flat_range(cuts[k], len), grads.flat_range(cuts[k], len)});
      params.push_back(std::move(p));
    }
  }
};

std::vector<uint16_t> bits(const Tensor& t, int64_t begin, int64_t n) {
  const auto* d = static_cast<const uint16_t*>(t.raw()) + begin;
  return {d, d + n};
}

TEST(DeferredStep, UpdatesUnitByUnitAndEqualsTheStepBitwise) {
  const std::string dir = temp_dir("kiri_deferred_step_");
  {
    Allocator alloc;
    offload::SwapSpace swap_a(swap_options(dir + "/a"), alloc),
        swap_b(swap_options(dir + "/b"), alloc);
    Model a(alloc, 7), b(alloc, 7);
    StateOffload oa = small_chunks(swap_a, 4), ob = small_chunks(swap_b, 4);
    oa.buffer_bytes = ob.buffer_bytes = 3 * 1024 * 4;  // master, m, v
    AdamWConfig cfg;
    AdamW opt_a(kNumel, a.segments, cfg, alloc, {}, oa),
        opt_b(kNumel, b.segments, cfg, alloc, {}, ob);
    opt_a.initialize(11);
    opt_b.initialize(11);
    for (int step = 0; step < 3; ++step) {
      const std::vector<uint16_t> before = bits(b.values, 0, kNumel);
      const double na = opt_a.clip_and_step(1e-2);
      const double nb = opt_b.clip_and_begin_step(1e-2);
      EXPECT_EQ(na, nb);
      EXPECT_TRUE(opt_b.step_pending());
      opt_b.update_through(3000);  // unit 0 (and chunks past it whose reads have landed)
      EXPECT_EQ(bits(b.values, 0, 3000), bits(a.values, 0, 3000)) << step;
      EXPECT_NE(bits(b.values, 0, 3000),
                std::vector<uint16_t>(before.begin(), before.begin() + 3000));
      opt_b.update_through(8000);
      EXPECT_EQ(bits(b.values, 0, 8000), bits(a.values, 0, 8000)) << step;
      opt_b.finish_step();
      EXPECT_FALSE(opt_b.step_pending());
      EXPECT_EQ(bits(b.values, 0, kNumel), bits(a.values, 0, kNumel)) << step;
    }
    for (State s : {State::kMaster, State::kExpAvg, State::kExpAvgSq}) {
      Tensor x = Tensor::empty({kNumel}, DType::kF32, Category::kOther, alloc);
      Tensor y = Tensor::empty({kNumel}, DType::kF32, Category::kOther, alloc);
      opt_a.read_state(s, 0, x);
      opt_b.read_state(s, 0, y);
      EXPECT_EQ(std::memcmp(x.raw(), y.raw(), kNumel * 4), 0) << state_name(s);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiri::optim
