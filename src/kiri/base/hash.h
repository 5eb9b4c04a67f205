#pragma once
// FNV-1a 64: a fast, stable hash of bytes, the same on every machine and run (shard
// checksums, tokenizer and config fingerprints, parameter-name RNG streams).
#include <cstdint>
#include <span>
#include <string_view>

namespace kiri {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// FNV-1a 64 of `bytes`, continuing from `h` (the offset basis to start; a previous
// result to hash a concatenation piece by piece).
inline uint64_t fnv1a64(std::span<const unsigned char> bytes, uint64_t h = kFnv1a64Offset) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnv1a64Prime;
  return h;
}
inline uint64_t fnv1a64(std::string_view s, uint64_t h = kFnv1a64Offset) {
  for (unsigned char c : s) h = (h ^ c) * kFnv1a64Prime;
  return h;
}

}  // namespace kiri
