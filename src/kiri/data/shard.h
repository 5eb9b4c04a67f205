#pragma once
// Token shards: a 64-byte header and the tokens, little-endian.
//
//   offset size  field
//        0    8  magic "KIRITOK1"
//        8    4  format version (u32, 1)
//       12   16  tokenizer name (ASCII, NUL-padded, at most 15 characters)
//       28    4  vocab size (u32)
//       32    4  token width in bytes (u32): 2 when vocab <= 65536, else 4
//       36    4  zero
//       40    8  token count (u64)
//       48    8  FNV-1a 64 checksum of the payload bytes (u64)
//       56    8  zero
//       64       payload: token count tokens of token width bytes each
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiri/base/hash.h"  // fnv1a64, the payload checksum

namespace kiri::data {

inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  std::string tokenizer;
  uint32_t vocab_size = 0;
  uint32_t token_width = 0;
  uint64_t token_count = 0;
  uint64_t checksum = 0;
};

struct TokenShard {
  ShardHeader header;
  std::vector<int32_t> tokens;
};

// The width write_shard uses for a vocabulary: 2 bytes up to 65536 tokens, else 4.
uint32_t token_width_for(uint32_t vocab_size);

// Writes atomically (path.tmp, fsync, rename). Raises kInvalidArgument on a
// name longer than 15 characters or a token outside [0, vocab_size), kIo when
// the file cannot be written.
void write_shard(const std::string& path, const std::string& tokenizer_name, uint32_t vocab_size,
                 std::span<const int32_t> tokens);

// Reads and checks the whole shard. Raises kData naming the path and the
// numbers on a missing file, one that is not a regular file (a FIFO or device,
// refused without blocking), a bad magic or version, a truncated or overlong
// file, a checksum mismatch or a token >= vocab size.
TokenShard read_shard(const std::string& path);

// The same checks over a shard's bytes in memory; `label` stands for the path in messages.
TokenShard parse_shard(std::span<const unsigned char> bytes, const std::string& label);

// Whether bytes start with the shard magic "KIRITOK1".
bool has_shard_magic(const unsigned char* bytes, uint64_t size);

// Parses and checks the 64 header bytes at h against the file's size (kData
// naming `path` and the numbers).
ShardHeader parse_header(const std::string& path, const unsigned char* h, uint64_t file_bytes);

// Reads and checks only the header (cheap: to decide whether a shard is current).
ShardHeader read_shard_header(const std::string& path);

}  // namespace kiri::data
