#pragma once
// Tokens read in place: a sequence of segments, each a run of little-endian
// unsigned tokens of 2 or 4 bytes in a memory-mapped file (or in memory). A
// training corpus is one TokenSource; the sample stream reads its windows from
// it, converting to int32 as it fills, so a rank touches only the pages of the
// samples it reads and the corpus never counts against the tensor allocator.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiri::data {

// A read-only mapping of a whole regular file. Raises kData naming the path on
// a missing file, one that is not a regular file (refused without blocking)
// or a failed mmap.
class MappedFile {
 public:
  // `what` names the file in messages ("token file", "corpus text").
  explicit MappedFile(const std::string& path, const std::string& what = "token file");
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

// Where a token file came from: its format decides how its bytes are read.
enum class TokenFormat { kKiri, kLlmc, kNanoGpt, kMemory };
const char* token_format_name(TokenFormat f);

struct TokenSegment {
  std::string label;  // the path (or "memory") for messages
  TokenFormat format = TokenFormat::kMemory;
  const unsigned char* data = nullptr;  // the first token
  uint32_t width = 4;                   // bytes per token: 2 or 4
  uint64_t count = 0;
  // kiri shards: the header's vocab size and FNV-1a 64 of the payload; 0 when unknown.
  uint32_t vocab_size = 0;
  uint64_t checksum = 0;
  bool has_checksum = false;
  std::string tokenizer;  // kiri shards: the header's tokenizer name
};

class TokenSource {
 public:
  TokenSource() = default;
  // Owns the tokens (tests, and corpora built in memory).
  explicit TokenSource(std::vector<int32_t> tokens);

  // Maps the token file and detects its format from the first bytes, never the
  // name: "KIRITOK1" (kiri's shard, header checked), int32 20240520 (llm.c,
  // version 1 = uint16 tokens, header[2] = the count), anything else is
  // nanoGPT's raw uint16 (an odd size is refused). Raises kData naming the file
  // and the numbers on a header that does not fit the file.
  static TokenSource open_file(const std::string& path);
  // The same over bytes in memory, which the caller keeps alive (the fuzz target's
  // entry point); `label` stands for the path in messages.
  static TokenSource from_bytes(std::span<const unsigned char> bytes, const std::string& label);

  // Appends other's segments (and keeps its storage alive).
  void append(const TokenSource& other);

  uint64_t size() const { return size_; }
  const std::vector<TokenSegment>& segments() const { return segments_; }
  int32_t at(uint64_t i) const;
  // Copies tokens [first, first + n) into out as int32; raises unless they exist.
  void read(uint64_t first, uint64_t n, int32_t* out) const;

  // One streaming pass over every token: each kiri segment's checksum, and
  // every token below vocab_size (0: skip that check). Raises kData naming
  // the file, the position and the numbers.
  void verify(uint32_t vocab_size) const;
  // The largest token id (a streaming pass; -1 when empty).
  int64_t max_token() const;

 private:
  std::vector<TokenSegment> segments_;
  std::vector<uint64_t> starts_;  // starts_[s] = the index of segment s's first token
  uint64_t size_ = 0;
  std::vector<std::shared_ptr<const void>> storage_;  // mappings and vectors kept alive
};

// llm.c's shard header: 256 int32; [0] magic, [1] version, [2] token count.
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;

}  // namespace kiri::data
