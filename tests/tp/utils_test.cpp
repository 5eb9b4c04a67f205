// divide(), vocab_range() and pad_vocab(): the sizes every tp split uses.
#include <gtest/gtest.h>

#include "kiri/base/error.h"
#include "kiri/parallel/tp/utils.h"

namespace kiri::parallel::tp {
namespace {

// The kind and message of the error f raises (kInternal, "" when none).
template <typename F>
std::pair<ErrorKind, std::string> error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.message()};
  }
  return {ErrorKind::kInternal, ""};
}

TEST(TpDivide, ReturnsTheQuotient) {
  EXPECT_EQ(divide(12, 4, "heads"), 3);
  EXPECT_EQ(divide(52, 1, "vocabulary"), 52);
  EXPECT_EQ(divide(0, 4, "rows"), 0);
}

TEST(TpDivide, ErrorNamesWhatAndTheNumbers) {
  auto [kind, message] = error_of([] { divide(50, 4, "vocabulary over tp ranks"); });
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_EQ(message, "vocabulary over tp ranks: 50 is not divisible by 4");
  std::tie(kind, message) = error_of([] { divide(7, 0, "n_head"); });
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_EQ(message, "n_head: 7 is not divisible by 0");
}

TEST(TpVocabRange, SplitsThePaddedVocabularyInRankOrder) {
  EXPECT_EQ(pad_vocab(50, 4), 52);
  EXPECT_EQ(pad_vocab(52, 4), 52);
  EXPECT_EQ(pad_vocab(50257, 128), 50304);
  for (int r = 0; r < 4; ++r) {
    const VocabRange v = vocab_range(52, r, 4);
    EXPECT_EQ(v.start, 13 * r);
    EXPECT_EQ(v.end, 13 * (r + 1));
    EXPECT_EQ(v.size(), 13);
  }
  auto [kind, message] = error_of([] { vocab_range(50, 0, 4); });
  EXPECT_EQ(kind, ErrorKind::kConfig);
  EXPECT_EQ(message, "padded vocabulary over tp ranks: 50 is not divisible by 4");
}

}  // namespace
}  // namespace kiri::parallel::tp
