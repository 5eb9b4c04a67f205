#pragma once
// Hugging Face safetensors, byte for byte:
//
//   u64 little-endian N | N bytes of JSON header, space-padded | raw data
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the start of the data) and may hold
// "__metadata__": {string: string}. Files written here read back in Python's
// safetensors and the other way round (for the dtypes kiri knows).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiri/tensor/tensor.h"

namespace kiri::ckpt {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Per-tensor checksums in the header's metadata (docs/checkpoints.md, "Checksums"):
//   "kiri.checksum": "xxh3_64"          the file declares them: every tensor has one
//   "kiri.xxh3_64.NAME": "16 hex digits" XXH3-64 of tensor NAME's data bytes
// Readers verify a tensor's checksum the first time any of its bytes are read; files
// without the declaration (Python's, older kiri's) load unverified.
enum class Checksums { kNone, kXxh3 };
// The header's metadata entry (a tensor may not take its name).
inline constexpr const char* kMetadataKey = "__metadata__";
inline constexpr const char* kChecksumKey = "kiri.checksum";
inline constexpr const char* kChecksumAlgorithm = "xxh3_64";
inline constexpr const char* kChecksumPrefix = "kiri.xxh3_64.";
// XXH3-64 of bytes, as the checksums hold it.
uint64_t checksum_of(const void* data, size_t bytes);
// A checksum as the files spell it: 16 lowercase hex digits.
std::string checksum_hex(uint64_t checksum);

// Writes the tensors in the order given, atomically (write_file_atomic), the
// data streamed from each tensor's memory. An empty metadata map writes no
// "__metadata__" key, as Python's save_file(metadata=None). Raises
// kCheckpoint on an undefined tensor, a duplicate or reserved name, kIo on a
// failed write.
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      Checksums checksums = Checksums::kNone);

// The header bytes (length prefix, JSON, padding) save_safetensors would
// write before the data (without checksums).
std::string safetensors_header(const std::vector<NamedTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// What the header says of a tensor: enough to write it before its bytes exist.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t nbytes() const;
};
std::string safetensors_header(const std::vector<TensorSpec>& specs,
                               const std::map<std::string, std::string>& metadata);

// Appends bytes of the tensor being written.
using AppendBytes = std::function<void(const void* data, size_t bytes)>;
// Writes the tensors' bytes for spec `index` through `append`, in as many pieces as it likes.
using FillTensor = std::function<void(size_t index, const AppendBytes& append)>;

// The file save_safetensors writes for tensors of these specs, byte for byte, but with no
// tensor in memory: the header first, then fill(0), fill(1), ... append each tensor's bytes
// in turn, so a state of any size is written through a buffer of the caller's choosing.
// Atomic as save_safetensors. A fill that appends more or fewer bytes than its spec says is
// a kCheckpoint error (and no file); an exception from fill leaves no file either. With
// checksums, the header holds placeholders that are overwritten once each tensor's bytes
// have been hashed on their way to the file (its length does not change).
void save_safetensors_streaming(const std::string& path, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata,
                                const FillTensor& fill, Checksums checksums = Checksums::kNone);

struct TensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // data_offsets, relative to the start of the data
  uint64_t end = 0;
  std::optional<uint64_t> checksum;  // the header's kiri.xxh3_64.NAME, when it has one
};

// A safetensors file read into memory and fully validated. Movable; the
// buffer does not move with the object, so views from get() survive a move.
class SafetensorsFile {
 public:
  // Reads and validates the whole file; any defect (truncation, bad JSON,
  // unknown dtype, bad shape, offsets that overlap, leave gaps, run past the
  // data or leave trailing bytes, duplicate names, a file that declares checksums without
  // one for each tensor) is a kCheckpoint error naming the file and the tensor. Unreadable
  // files are kIo errors. Checksums are verified when a tensor is first read (get, read_*):
  // a mismatch is a kCheckpoint error naming the file, the tensor and both values.
  static SafetensorsFile open(const std::string& path);
  // The same checks, with the data memory-mapped (private, copy-on-write) instead of read:
  // only the pages of the tensors read are touched, so a rank that loads its part of a large
  // model reads only that part. Falls back to open()'s read when the data start is not 8-byte
  // aligned (never so in kiri's or Python's files) or mmap fails. The file must not shrink
  // while mapped (a read past its new end is SIGBUS).
  static SafetensorsFile map(const std::string& path);
  // The same over bytes in memory; `label` stands for the path in messages.
  static SafetensorsFile parse(const std::string& bytes, const std::string& label);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }  // file order
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // kCheckpoint if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Whether the header declares per-tensor checksums (kiri.checksum).
  bool has_checksums() const { return has_checksums_; }
  // XXH3-64 of the header's JSON bytes: it covers the metadata (the checksums with it), so
  // a checkpoint's manifest binds the whole file by it without reading the data.
  uint64_t header_digest() const { return header_digest_; }
  // Verifies tensor `name` against its checksum now (no-op without one, or once verified).
  void verify(const std::string& name) const;

  // A view borrowing this file's buffer: no copy, but the SafetensorsFile
  // must outlive the tensor, and writes to it change the buffer. Raises
  // kCheckpoint when the tensor's offset is not aligned to its dtype size
  // (legal in the format, never written by kiri or Python); read_into works
  // for those.
  Tensor get(const std::string& name) const;
  // Copies into dst, whose dtype and shape must equal the file's.
  void read_into(const std::string& name, Tensor& dst) const;
  // Copies into dst of the same shape, converting between floating dtypes
  // (F32, BF16, F16, F64) as Tensor::copy_from does; integer dtypes must match.
  void read_into_converting(const std::string& name, Tensor& dst) const;
  // Elements [first, first + dst.numel()) of the tensor (in its flat order) into dst,
  // converting as read_into_converting: a piece of a state, never the whole of it. A range
  // outside the tensor is kCheckpoint naming both.
  void read_range(const std::string& name, int64_t first, Tensor& dst) const;
  // Drops the pages of the tensor's bytes from this process and from the page cache once
  // they have been read (madvise / posix_fadvise DONTNEED), so streaming a large state
  // through a mapped file leaves neither holding it. No-op for files read into memory.
  void release(const std::string& name) const;
  bool mapped() const { return mapped_; }

 private:
  // Reads `bytes` bytes at `offset` of the source into `dst`.
  using ReadAt = std::function<void(uint64_t offset, size_t bytes, char* dst)>;

  SafetensorsFile() = default;
  static SafetensorsFile open_file(const std::string& path, bool mapped);
  // map_fd >= 0: map the data from that descriptor rather than read it.
  void load(uint64_t total, const ReadAt& read_at, int map_fd = -1);
  void load_header(const char* json, size_t json_size, uint64_t data_size);
  void check_layout(uint64_t data_size) const;
  void parse_checksums();
  const char* data_of(const TensorInfo& info) const { return data_ + info.begin; }

  std::string path_;
  std::shared_ptr<char[]> buffer_;  // 64-byte aligned at the data start (read), or the mapping
  bool mapped_ = false;
  std::shared_ptr<int> map_fd_;  // the mapped file, kept open for posix_fadvise
  const char* data_ = nullptr;   // start of the tensor data inside buffer_
  std::vector<std::string> names_;
  std::unordered_map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
  bool has_checksums_ = false;
  uint64_t header_digest_ = 0;
  // Tensors whose checksum has been verified (a copy of the file shares them).
  struct Verified {
    std::mutex mutex;
    std::set<std::string> names;
  };
  std::shared_ptr<Verified> verified_ = std::make_shared<Verified>();
};

}  // namespace kiri::ckpt
