// CRC-32C against its published check value and RFC 3720's test vectors (iSCSI, B.4).
#include "kiri/base/crc32c.h"

#include <gtest/gtest.h>

#include <string>

namespace kiri {
namespace {

TEST(Crc32c, CheckValueOf123456789) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
}

TEST(Crc32c, Rfc3720Vectors) {
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up += static_cast<char>(i);
    down += static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32c, ContinuesAcrossPieces) {
  const std::string s = "the quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32c(s.substr(17), crc32c(s.substr(0, 17))), crc32c(s));
}

}  // namespace
}  // namespace kiri
