// The memory bandwidth measurement (kernels/bandwidth.h): a rate, its default arrays larger
// than the last-level cache, and its arguments checked.
#include "kiri/kernels/bandwidth.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiri/base/error.h"

namespace kiri::kernels {
namespace {

TEST(MemoryBandwidth, MeasuresAFiniteRateOnOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    // 64 MiB arrays: small enough for a quick test (this may be a cache's rate).
    const double bw = measure_memory_bandwidth(threads, int64_t{64} << 20, 2);
    EXPECT_TRUE(std::isfinite(bw)) << threads;
    // Above 100 MB/s (a pass of 192 MiB in under 2 s) and below 100 TB/s.
    EXPECT_GT(bw, 1e8) << threads;
    EXPECT_LT(bw, 1e14) << threads;
  }
}

TEST(MemoryBandwidth, DefaultArraysOutgrowTheLastLevelCache) {
  const int64_t bytes = default_bandwidth_array_bytes();
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const int64_t memory = int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGESIZE);
  ASSERT_GT(memory, 0);
  EXPECT_GE(bytes, std::min<int64_t>(int64_t{256} << 20, memory / 8));
  if (l3 > 0 && 2 * int64_t{l3} <= memory / 8) {
    EXPECT_GE(bytes, 2 * int64_t{l3});
  }
  EXPECT_LE(bytes, std::max<int64_t>(memory / 8, int64_t{256} << 20));
}

TEST(MemoryBandwidth, RejectsBadArguments) {
  EXPECT_THROW(measure_memory_bandwidth(0, 1 << 20, 1), Error);
  EXPECT_THROW(measure_memory_bandwidth(1, 1 << 20, 0), Error);
  EXPECT_THROW(measure_memory_bandwidth(1, 100, 1), Error);
}

}  // namespace
}  // namespace kiri::kernels
