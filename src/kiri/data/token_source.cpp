#include "kiri/data/token_source.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/shard.h"

namespace kiri::data {

namespace {

uint32_t get_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

uint32_t token_at(const TokenSegment& s, uint64_t i) {
  const unsigned char* p = s.data + i * s.width;
  return s.width == 2 ? static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 : get_u32(p);
}

TokenSegment llmc_segment(const unsigned char* h, uint64_t size, const std::string& path) {
  const uint32_t version = get_u32(h + 4);
  const uint64_t count = get_u32(h + 8);
  if (version != 1)
    KIRI_RAISE(kData, "llm.c token shard ", path, " has version ", version,
               "; kiri reads version 1 (uint16 tokens)");
  const uint64_t payload = size - kLlmcHeaderBytes;
  if (count * 2 != payload)
    KIRI_RAISE(kData, "llm.c token shard ", path, " has the wrong token count: header says ", count,
               " tokens of 2 bytes = ", count * 2, " payload bytes, file holds ", payload);
  TokenSegment s;
  s.format = TokenFormat::kLlmc;
  s.data = h + kLlmcHeaderBytes;
  s.width = 2;
  s.count = count;
  s.vocab_size = 65536;
  return s;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const std::string& what) : path_(path) {
  int fd = -1;
  try {
    fd = open_regular_file(path, ErrorKind::kData, what);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kIo) throw;
    KIRI_RAISE(kData, e.message());  // a missing token file is bad data
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    KIRI_RAISE(kData, "cannot stat ", what, " ", path, ": ", std::strerror(err));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      KIRI_RAISE(kData, "cannot map ", what, " ", path, ": ", std::strerror(err));
    data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

const char* token_format_name(TokenFormat f) {
  switch (f) {
    case TokenFormat::kKiri:
      return "kiri";
    case TokenFormat::kLlmc:
      return "llm.c";
    case TokenFormat::kNanoGpt:
      return "nanoGPT";
    case TokenFormat::kMemory:
      return "memory";
  }
  return "?";
}

TokenSource::TokenSource(std::vector<int32_t> tokens) {
  auto owned = std::make_shared<const std::vector<int32_t>>(std::move(tokens));
  for (int32_t t : *owned) KIRI_CHECK(t >= 0, "token ", t, " is negative");
  TokenSegment s;
  s.label = "memory";
  s.data = reinterpret_cast<const unsigned char*>(owned->data());
  s.width = 4;
  s.count = owned->size();
  static_assert(std::endian::native == std::endian::little, "tokens are read little-endian");
  segments_.push_back(s);
  starts_.push_back(0);
  size_ = s.count;
  storage_.push_back(owned);
}

TokenSource TokenSource::open_file(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  TokenSource src = from_bytes({file->data(), file->size()}, path);
  src.storage_.push_back(file);
  return src;
}

TokenSource TokenSource::from_bytes(std::span<const unsigned char> bytes,
                                    const std::string& label) {
  const unsigned char* d = bytes.data();
  const uint64_t n = bytes.size();
  TokenSegment s;
  if (has_shard_magic(d, n)) {
    if (n < kShardHeaderBytes)
      KIRI_RAISE(kData, "token shard ", label, " is truncated: ", n, " bytes, shorter than the ",
                 kShardHeaderBytes, "-byte header");
    const ShardHeader h = parse_header(label, d, n);
    s.format = TokenFormat::kKiri;
    s.data = d + kShardHeaderBytes;
    s.width = h.token_width;
    s.count = h.token_count;
    s.vocab_size = h.vocab_size;
    s.checksum = h.checksum;
    s.has_checksum = true;
    s.tokenizer = h.tokenizer;
  } else if (n >= kLlmcHeaderBytes && static_cast<int32_t>(get_u32(d)) == kLlmcMagic) {
    s = llmc_segment(d, n, label);
  } else {
    if (n % 2 != 0)
      KIRI_RAISE(kData, "token file ", label, " has no kiri or llm.c header and an odd size (", n,
                 " bytes), so it is not nanoGPT's raw uint16 tokens either");
    s.format = TokenFormat::kNanoGpt;
    s.data = d;
    s.width = 2;
    s.count = n / 2;
    s.vocab_size = 65536;
  }
  s.label = label;
  TokenSource src;
  src.segments_.push_back(s);
  src.starts_.push_back(0);
  src.size_ = s.count;
  return src;
}

void TokenSource::append(const TokenSource& other) {
  for (const TokenSegment& s : other.segments_) {
    segments_.push_back(s);
    starts_.push_back(size_);
    size_ += s.count;
  }
  storage_.insert(storage_.end(), other.storage_.begin(), other.storage_.end());
}

int32_t TokenSource::at(uint64_t i) const {
  int32_t t;
  read(i, 1, &t);
  return t;
}

void TokenSource::read(uint64_t first, uint64_t n, int32_t* out) const {
  KIRI_CHECK(first <= size_ && n <= size_ - first, "tokens [", first, ", ", first + n,
             ") are past the end of ", size_);
  if (n == 0) return;  // also for a source with no segments
  // The segment holding `first`: the last start <= first.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) -
                                 starts_.begin()) -
             1;
  uint64_t i = first - starts_[s];
  while (n > 0) {
    const TokenSegment& seg = segments_[s];
    const uint64_t take = std::min(n, seg.count - i);
    if (seg.width == 4) {
      std::memcpy(out, seg.data + i * 4, take * 4);
    } else {
      const unsigned char* p = seg.data + i * 2;
      for (uint64_t k = 0; k < take; ++k)
        out[k] = static_cast<int32_t>(p[2 * k] | static_cast<uint32_t>(p[2 * k + 1]) << 8);
    }
    out += take;
    n -= take;
    i = 0;
    ++s;
  }
}

void TokenSource::verify(uint32_t vocab_size) const {
  for (const TokenSegment& s : segments_) {
    if (s.has_checksum) {
      const uint64_t sum = fnv1a64({s.data, s.count * s.width});
      if (sum != s.checksum)
        KIRI_RAISE(kData, "token shard ", s.label, " fails its checksum: header says ", s.checksum,
                   ", payload hashes to ", sum);
    }
    if (vocab_size == 0) continue;
    for (uint64_t i = 0; i < s.count; ++i) {
      const uint32_t t = token_at(s, i);
      if (t >= vocab_size)
        KIRI_RAISE(kData, "token file ", s.label, " (", token_format_name(s.format), "): token ", t,
                   " at position ", i, " is not below the model's vocab size ", vocab_size,
                   " (set model.vocab_size, or use the tokenizer that made it)");
    }
  }
}

int64_t TokenSource::max_token() const {
  int64_t m = -1;
  for (const TokenSegment& s : segments_)
    for (uint64_t i = 0; i < s.count; ++i) m = std::max<int64_t>(m, token_at(s, i));
  return m;
}

}  // namespace kiri::data
