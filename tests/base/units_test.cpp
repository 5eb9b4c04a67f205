// Byte sizes from users (--mem-limit, train.mem_limit): parsed exactly, and absurd or
// overflowing sizes refused by name instead of converted to garbage.
#include "kiri/base/units.h"

#include <gtest/gtest.h>

#include <string>

#include "kiri/base/error.h"

namespace kiri {
namespace {

void expect_refused(const std::string& text, const std::string& part) {
  try {
    const int64_t v = parse_bytes(text);
    FAIL() << "'" << text << "' was accepted as " << v;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 400u) << "the message quotes too much";
  }
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_bytes("123"), 123);
  EXPECT_EQ(parse_bytes("64KiB"), 65536);
  EXPECT_EQ(parse_bytes("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(parse_bytes("1.5GB"), 1500000000);
  EXPECT_EQ(parse_bytes("512 MB"), 512000000);
  EXPECT_EQ(parse_bytes("1048576TiB"), int64_t{1} << 60);  // the largest accepted
}

TEST(Units, RefusesOverflowAndAbsurdSizes) {
  expect_refused("99999999999999999999TiB", "more than the 1 EiB (2^60 bytes)");
  expect_refused("1048577TiB", "more than the 1 EiB");
  expect_refused("9223372036854775807", "more than the 1 EiB");
  expect_refused("1e400", "cannot read a byte size");
  expect_refused("inf", "cannot read a byte size");
  expect_refused("nan", "cannot read a byte size");
  expect_refused("-1GiB", "cannot read a byte size");
  expect_refused("12 parsecs", "cannot read a byte size");
  expect_refused(std::string(100000, '7') + "x", "characters)");  // quoted within bounds
}

}  // namespace
}  // namespace kiri
