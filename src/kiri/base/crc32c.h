#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI, ext4 and the TFRecord
// framing of TensorBoard's event files use it. Debian 12 packages no crc32c library (its
// libcrc32c-dev came later), so this is the standard byte-wise table; the check value of
// "123456789" is 0xE3069283 (tests/base/crc32c_test.cpp).
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiri {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start; a previous result to
// checksum a concatenation piece by piece).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view s, uint32_t crc = 0) {
  return crc32c(s.data(), s.size(), crc);
}

}  // namespace kiri
