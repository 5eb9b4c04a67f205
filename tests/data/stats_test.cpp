#include "kiri/data/stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "data/test_util.h"

namespace kiri::data {
namespace {

TEST(UnigramEntropy, MatchesClosedForms) {
  EXPECT_DOUBLE_EQ(unigram_entropy_nats(std::vector<int32_t>{3, 3, 3}, 10), 0.0);
  EXPECT_NEAR(unigram_entropy_nats(std::vector<int32_t>{0, 1, 2, 3}, 4), std::log(4.0), 1e-12);
  // p = (1/2, 1/4, 1/4): H = 1.5 ln 2.
  EXPECT_NEAR(unigram_entropy_nats(std::vector<int32_t>{0, 0, 1, 2}, 3), 1.5 * std::log(2.0),
              1e-12);
}

TEST(UnigramEntropy, RefusesBadInput) {
  testing::expect_error([] { unigram_entropy_nats(std::vector<int32_t>{}, 4); },
                        ErrorKind::kInvalidArgument, {"0 tokens"});
  testing::expect_error(
      [] {
        unigram_entropy_nats(std::vector<int32_t>{1, 4}, 4);
      },
      ErrorKind::kInvalidArgument, {"token 4", "position 1"});
}

}  // namespace
}  // namespace kiri::data
