#include "kiri/base/stats.h"

#include <gtest/gtest.h>

namespace kiri {
namespace {

TEST(Median, MiddleElementOrTheUpperOfTwoOrZero) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 3.0);  // a measured value, not 2.5
  EXPECT_EQ(median({7.5}), 7.5);
  EXPECT_EQ(median({}), 0.0);
}

}  // namespace
}  // namespace kiri
