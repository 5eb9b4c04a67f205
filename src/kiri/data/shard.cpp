#include "kiri/data/shard.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/io.h"

namespace kiri::data {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'R', 'I', 'T', 'O', 'K', '1'};
constexpr size_t kNameBytes = 16;

void put_le(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

bool has_shard_magic(const unsigned char* bytes, uint64_t size) {
  return size >= sizeof(kMagic) && std::memcmp(bytes, kMagic, sizeof(kMagic)) == 0;
}

ShardHeader parse_header(const std::string& path, const unsigned char* h, uint64_t file_bytes) {
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0)
    KIRI_RAISE(kData, "token shard ", path, " has a bad magic (want KIRITOK1)");
  ShardHeader header;
  header.version = static_cast<uint32_t>(get_le(h + 8, 4));
  if (header.version != kShardVersion)
    KIRI_RAISE(kData, "token shard ", path, " has format version ", header.version,
               "; this kiri reads version ", kShardVersion);
  const char* name = reinterpret_cast<const char*>(h + 12);
  header.tokenizer.assign(name, strnlen(name, kNameBytes));
  header.vocab_size = static_cast<uint32_t>(get_le(h + 28, 4));
  header.token_width = static_cast<uint32_t>(get_le(h + 32, 4));
  header.token_count = get_le(h + 40, 8);
  header.checksum = get_le(h + 48, 8);
  if (header.vocab_size == 0 || header.vocab_size > (1u << 31) ||
      header.token_width != token_width_for(header.vocab_size))
    KIRI_RAISE(kData, "token shard ", path, " has vocab size ", header.vocab_size,
               " and token width ", header.token_width, " (want width ",
               token_width_for(header.vocab_size), ")");
  const uint64_t payload = file_bytes - kShardHeaderBytes;
  if (header.token_count > payload / header.token_width)
    KIRI_RAISE(kData, "token shard ", path, " is truncated: header says ", header.token_count,
               " tokens of ", header.token_width, " bytes, file holds ", payload, " payload bytes");
  if (header.token_count * header.token_width != payload)
    KIRI_RAISE(kData, "token shard ", path, " has the wrong token count: header says ",
               header.token_count, " tokens of ", header.token_width,
               " bytes = ", header.token_count * header.token_width, " payload bytes, file holds ",
               payload, " payload bytes");
  return header;
}

namespace {

// An open shard: a regular file (a FIFO or device as a shard would block open() or read
// forever, so it is refused without blocking) and its size at open.
struct ShardFile {
  int fd = -1;
  uint64_t size = 0;
  const std::string& path;

  explicit ShardFile(const std::string& p) : path(p) {
    try {
      fd = open_regular_file(path, ErrorKind::kData, "token shard");
    } catch (const Error& e) {
      // A missing or unreadable shard is a data problem for the caller, as before.
      if (e.kind() != ErrorKind::kIo) throw;
      KIRI_RAISE(kData, e.message());
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      KIRI_RAISE(kData, "cannot stat token shard ", path, ": ", std::strerror(err));
    }
    size = static_cast<uint64_t>(st.st_size);
  }
  ~ShardFile() { ::close(fd); }
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  void read_at(uint64_t offset, size_t n, unsigned char* dst) const {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, dst + done, std::min<size_t>(n - done, size_t{1} << 30),
                                static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) KIRI_RAISE(kData, "read of token shard ", path, " failed: ", std::strerror(errno));
      if (r == 0)
        KIRI_RAISE(kData, "token shard ", path, " shrank while being read: ", offset + done,
                   " of the ", size, " bytes it had at open");
      done += static_cast<size_t>(r);
    }
  }
};

}  // namespace

uint32_t token_width_for(uint32_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

void write_shard(const std::string& path, const std::string& tokenizer_name, uint32_t vocab_size,
                 std::span<const int32_t> tokens) {
  KIRI_CHECK(!tokenizer_name.empty() && tokenizer_name.size() < kNameBytes, "tokenizer name '",
             tokenizer_name, "' for ", path, " must have 1 to ", kNameBytes - 1, " characters");
  KIRI_CHECK(vocab_size > 0 && vocab_size <= (1u << 31), "vocab size ", vocab_size, " for ", path);
  const uint32_t width = token_width_for(vocab_size);
  std::string payload(tokens.size() * width, '\0');
  auto* p = reinterpret_cast<unsigned char*>(payload.data());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= vocab_size)
      KIRI_RAISE(kInvalidArgument, "token ", tokens[i], " at position ", i, " for ", path,
                 " is outside [0, ", vocab_size, ")");
    put_le(p + i * width, static_cast<uint32_t>(tokens[i]), static_cast<int>(width));
  }
  unsigned char h[kShardHeaderBytes] = {};
  std::memcpy(h, kMagic, sizeof(kMagic));
  put_le(h + 8, kShardVersion, 4);
  std::memcpy(h + 12, tokenizer_name.data(), tokenizer_name.size());
  put_le(h + 28, vocab_size, 4);
  put_le(h + 32, width, 4);
  put_le(h + 40, tokens.size(), 8);
  put_le(h + 48, fnv1a64({p, payload.size()}), 8);
  write_file_atomic(path, {std::string_view(reinterpret_cast<const char*>(h), sizeof(h)),
                           std::string_view(payload)});
}

TokenShard parse_shard(std::span<const unsigned char> bytes, const std::string& label) {
  if (bytes.size() < kShardHeaderBytes)
    KIRI_RAISE(kData, "token shard ", label, " is truncated: ", bytes.size(),
               " bytes, shorter than the ", kShardHeaderBytes, "-byte header");
  TokenShard shard;
  shard.header = parse_header(label, bytes.data(), bytes.size());
  const ShardHeader& h = shard.header;
  const std::span<const unsigned char> payload = bytes.subspan(kShardHeaderBytes);
  const uint64_t sum = fnv1a64(payload);
  if (sum != h.checksum)
    KIRI_RAISE(kData, "token shard ", label, " fails its checksum: header says ", h.checksum,
               ", payload hashes to ", sum);
  shard.tokens.resize(h.token_count);
  const int width = static_cast<int>(h.token_width);
  for (uint64_t i = 0; i < h.token_count; ++i) {
    const uint64_t t = get_le(payload.data() + i * width, width);
    if (t >= h.vocab_size)
      KIRI_RAISE(kData, "token shard ", label, ": token ", t, " at position ", i,
                 " is not below the vocab size ", h.vocab_size);
    shard.tokens[i] = static_cast<int32_t>(t);
  }
  return shard;
}

TokenShard read_shard(const std::string& path) {
  ShardFile file(path);
  std::vector<unsigned char> bytes(file.size);
  file.read_at(0, bytes.size(), bytes.data());
  return parse_shard(bytes, path);
}

ShardHeader read_shard_header(const std::string& path) {
  ShardFile file(path);
  unsigned char h[kShardHeaderBytes];
  if (file.size < kShardHeaderBytes)
    KIRI_RAISE(kData, "token shard ", path, " is truncated: ", file.size,
               " bytes, shorter than the ", kShardHeaderBytes, "-byte header");
  file.read_at(0, sizeof(h), h);
  return parse_header(path, h, file.size);
}

}  // namespace kiri::data
