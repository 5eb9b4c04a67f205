#pragma once
// Byte sizes in both directions: "2GiB" <-> 2147483648.
#include <cstdint>
#include <string>

namespace kiri {

// Parses "123", "64KiB", "2GiB", "1.5GB", "512MB"; raises kInvalidArgument naming the text
// (quoted within bounds), also for a size above 1 EiB (2^60 bytes).
int64_t parse_bytes(const std::string& text);
// 1536 -> "1.50 KiB".
std::string format_bytes(int64_t bytes);

}  // namespace kiri
