#include "kiri/tensor/allocator.h"

#include <gtest/gtest.h>

#include "kiri/tensor/tensor.h"

namespace kiri {
namespace {

TEST(Allocator, CountsCurrentAndPeakPerCategory) {
  Allocator a;
  {
    Tensor p = Tensor::empty({10, 10}, DType::kF32, Category::kParameters, a);
    Tensor g = Tensor::empty({3}, DType::kF64, Category::kGradients, a);
    EXPECT_EQ(a.stats().of(Category::kParameters), 400);
    EXPECT_EQ(a.stats().of(Category::kGradients), 24);
    EXPECT_EQ(a.stats().allocated, 424);
  }
  MemoryStats s = a.stats();
  EXPECT_EQ(s.allocated, 0);
  EXPECT_EQ(s.peak_of(Category::kParameters), 400);
  EXPECT_EQ(s.peak_allocated, 424);
  EXPECT_GT(s.reserved, 0);  // cached for reuse
}

TEST(Allocator, ReusesFreedBlocks) {
  Allocator a;
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1 << 20}, DType::kF32, Category::kActivations, a);
    first = t.raw();
  }
  Tensor t = Tensor::empty({1 << 20}, DType::kF32, Category::kActivations, a);
  EXPECT_EQ(t.raw(), first);
  EXPECT_EQ(a.stats().cache_hits, 1);
  EXPECT_EQ(a.stats().reserved, 4 << 20);
}

// A miss that would raise the high-water mark while smaller cached blocks add up to the
// request hands them back, so the process does not grow by the request while as much sits
// idle in the cache; smaller blocks that do not add up to it, larger ones, and any miss
// under the high-water mark keep the cache. (Tensor::empty touches nothing: blocks this
// large are mapped lazily and cost no memory.)
TEST(Allocator, MissReturnsSmallerCachedBlocksThatAddUpToIt) {
  Allocator a;
  const int64_t mib = 1 << 20;
  auto f32 = [&](int64_t bytes) {
    return Tensor::empty({bytes / 4}, DType::kF32, Category::kActivations, a);
  };
  {
    Tensor s1 = f32(mib), s2 = f32(mib), x = f32(32 * mib), y = f32(32 * mib), big = f32(300 * mib);
  }
  EXPECT_EQ(a.stats().reserved, 366 * mib);
  {
    // 96 MiB: the cached 1, 1, 32 and 32 MiB blocks add up to 66 only; 300 MiB is over 2x.
    Tensor t = f32(96 * mib);
    EXPECT_EQ(a.stats().cache_returns, 0);
    EXPECT_EQ(a.stats().reserved, 462 * mib);
  }
  // 128 MiB: the cached 1, 1, 32, 32 and 96 MiB blocks (162) go back; 300 stays.
  Tensor t = f32(128 * mib);
  EXPECT_EQ(a.stats().cache_returns, 1);
  EXPECT_EQ(a.stats().reserved, 428 * mib);
  EXPECT_EQ(a.stats().allocated, 128 * mib);
  EXPECT_EQ(a.stats().cache_hits, 0);
}

TEST(Allocator, MissUnderTheHighWaterMarkKeepsTheCache) {
  Allocator a;
  const int64_t mib = 1 << 20;
  auto f32 = [&](int64_t bytes) {
    return Tensor::empty({bytes / 4}, DType::kF32, Category::kActivations, a);
  };
  { Tensor big = f32(512 * mib); }
  a.release_cache();  // a 512 MiB high-water mark, nothing held
  { Tensor x = f32(32 * mib), y = f32(32 * mib); }
  // 64 MiB: the two cached 32 MiB blocks add up to it, but 128 MiB is under 512.
  Tensor u = f32(64 * mib);
  EXPECT_EQ(a.stats().cache_returns, 0);
  EXPECT_EQ(a.stats().reserved, 128 * mib);
}

TEST(Allocator, LimitRaisesOutOfMemoryWithBreakdown) {
  Allocator a;
  a.set_limit(1000);
  Tensor p = Tensor::empty({200}, DType::kF32, Category::kParameters, a);
  try {
    Tensor q = Tensor::empty({100}, DType::kF32, Category::kActivations, a);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    std::string m = e.what();
    EXPECT_NE(m.find("largest category is parameters"), std::string::npos) << m;
    EXPECT_NE(m.find("activations"), std::string::npos) << m;
  }
  EXPECT_EQ(a.stats().of(Category::kActivations), 0);
}

TEST(Tensor, ViewsShareStorage) {
  Allocator a;
  Tensor t = Tensor::zeros({4, 3}, DType::kF32, Category::kOther, a);
  Tensor rows = t.slice(1, 3);
  rows.fill_(2.0);
  EXPECT_EQ(t.item(2), 0.0);
  EXPECT_EQ(t.item(3), 2.0);
  EXPECT_EQ(t.item(8), 2.0);
  EXPECT_EQ(t.item(9), 0.0);
  EXPECT_THROW(t.view({5, 3}), Error);
  Tensor b = Tensor::empty({12}, DType::kBF16, Category::kOther, a);
  b.copy_from(t);
  EXPECT_EQ(b.item(4), 2.0);
}

}  // namespace
}  // namespace kiri
