// json_duplicate_key: the first key that appears twice in one object, as a dotted path.
#include "kiri/base/json_guard.h"

#include <gtest/gtest.h>

namespace kiri {
namespace {

TEST(JsonGuard, DuplicateKeysAreFoundWithTheirPath) {
  EXPECT_EQ(json_duplicate_key("{\"a\": 1, \"b\": {\"c\": 1, \"c\": 2}}", false), "b.c");
  EXPECT_EQ(json_duplicate_key("{\"a\": [{\"x\": 1}, {\"x\": 2}]}", false), "");
  EXPECT_EQ(json_duplicate_key("{\"a\": [{\"x\": 1, \"x\": 2}]}", false), "a.x");
  EXPECT_EQ(json_duplicate_key("{\"a\": 1, // c\n \"a\": 2}", true), "a");
  EXPECT_EQ(json_duplicate_key("{\"a\": 1, \"b\": 2}", false), "");
  EXPECT_EQ(json_duplicate_key("{not json", false), "");
}

}  // namespace
}  // namespace kiri
