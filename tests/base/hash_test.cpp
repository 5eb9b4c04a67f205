#include "kiri/base/hash.h"

#include <gtest/gtest.h>

#include <string>

namespace kiri {
namespace {

// The published FNV-1a 64 test vectors (Fowler, Noll, Vo).
TEST(Fnv1a64, KnownVectors) {
  EXPECT_EQ(fnv1a64(std::string_view("")), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64(std::string_view("a")), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64(std::string_view("foobar")), 0x85944171f73967e8ull);
}

TEST(Fnv1a64, BytesEqualTextAndPiecesChain) {
  const std::string s = "foobar";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  EXPECT_EQ(fnv1a64(std::span<const unsigned char>(p, s.size())), fnv1a64(s));
  EXPECT_EQ(fnv1a64(std::string_view("bar"), fnv1a64(std::string_view("foo"))), fnv1a64(s));
}

}  // namespace
}  // namespace kiri
