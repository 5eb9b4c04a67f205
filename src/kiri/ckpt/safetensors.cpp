#include "kiri/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"

namespace kiri::ckpt {

// The format is little-endian; kiri writes tensors' memory as it is.
static_assert(std::endian::native == std::endian::little, "safetensors IO assumes little-endian");

namespace {

// Reading uses the sorted map, whose insertion is O(log n) (ordered_json's linear key search
// made a header of 80k tensors take 30 s), and recovers the file order from the parser's key
// events. (Writing, safetensors_write.cpp, keeps the order of the tensors given.)
using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // Python's safetensors refuses more, too
// A valid header nests 3 deep (header, tensor, shape); past this the input is hostile, and
// nlohmann's recursive dump() would overflow the stack on it.
constexpr int kMaxHeaderDepth = 16;
// Far above any model (GPT-3 175B has ~2,000 tensors), far below what parses in seconds.
constexpr size_t kMaxTensors = 1'000'000;
constexpr DType kAllDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64,
                                DType::kI32, DType::kU16,  DType::kU8};

bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16 || d == DType::kF64;
}

std::shared_ptr<char[]> aligned_buffer(size_t bytes) {
  constexpr std::align_val_t kAlign{64};
  char* p = static_cast<char*>(::operator new[](std::max<size_t>(bytes, 1), kAlign));
  return std::shared_ptr<char[]>(p, [](char* q) { ::operator delete[](q, std::align_val_t{64}); });
}

}  // namespace

uint64_t checksum_of(const void* data, size_t bytes) {
  return XXH3_64bits(data, bytes);
}

std::string checksum_hex(uint64_t checksum) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(checksum));
  return buf;
}

uint64_t TensorSpec::nbytes() const {
  return static_cast<uint64_t>(shape.numel()) * dtype_size(dtype);
}

namespace {

// Everything the checks need to build a message.
struct Ctx {
  const std::string& file;
  std::string prefix() const { return str("safetensors file ", file, ": "); }
};

DType parse_dtype(const Ctx& c, const std::string& name, const Json& entry) {
  auto it = entry.find("dtype");
  if (it == entry.end() || !it->is_string())
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has no string \"dtype\"");
  const std::string s = it->get<std::string>();
  for (DType d : kAllDTypes)
    if (s == dtype_name(d)) return d;
  KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has unsupported dtype '", s,
             "' (kiri reads F32, BF16, F16, F64, I32, U16, U8)");
}

// The shape, and its size in bytes (overflow-checked).
std::pair<Shape, uint64_t> parse_shape(const Ctx& c, const std::string& name, const Json& entry,
                                       DType dtype) {
  auto it = entry.find("shape");
  if (it == entry.end() || !it->is_array())
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has no \"shape\" array");
  std::vector<int64_t> dims;
  uint64_t bytes = dtype_size(dtype);
  int64_t elements = 1;  // as Shape::numel multiplies: left to right, in int64
  for (const Json& d : *it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62))
      KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has shape ",
                 quote_bounded(it->dump()), ": dimension ", quote_bounded(d.dump()),
                 " is not an integer in [0, 2^62]");
    const uint64_t v = d.get<uint64_t>();
    // [2^62, 3, 0] holds 0 bytes, but its element count overflows on the way (fuzz finding).
    if (__builtin_mul_overflow(bytes, v, &bytes) ||
        __builtin_mul_overflow(elements, static_cast<int64_t>(v), &elements))
      KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has shape ",
                 quote_bounded(it->dump()), ", too large to address");
    dims.push_back(static_cast<int64_t>(v));
  }
  return {Shape(std::move(dims)), bytes};
}

void parse_offsets(const Ctx& c, const std::string& name, const Json& entry, uint64_t bytes,
                   uint64_t data_size, TensorInfo* info) {
  auto it = entry.find("data_offsets");
  if (it == entry.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_unsigned() ||
      !(*it)[1].is_number_unsigned())
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name,
               "' needs \"data_offsets\": [begin, end] of non-negative integers, found ",
               it == entry.end() ? std::string("none") : quote_bounded(it->dump()));
  info->begin = (*it)[0].get<uint64_t>();
  info->end = (*it)[1].get<uint64_t>();
  if (info->begin > info->end)
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has data_offsets [", info->begin, ", ",
               info->end, "]: begin after end");
  if (info->end - info->begin != bytes)
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' is ", dtype_name(info->dtype), " ",
               info->shape.str(), " = ", bytes, " bytes, but data_offsets [", info->begin, ", ",
               info->end, "] span ", info->end - info->begin);
  if (info->end > data_size)
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", name, "' has data_offsets [", info->begin, ", ",
               info->end, "] past the end of the ", data_size, " data bytes");
}

std::map<std::string, std::string> parse_metadata(const Ctx& c, const Json& meta) {
  if (!meta.is_object())
    KIRI_RAISE(kCheckpoint, c.prefix(),
               "\"__metadata__\" is not an object: ", quote_bounded(meta.dump()));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      KIRI_RAISE(kCheckpoint, c.prefix(), "metadata '", quote_bounded(key),
                 "' is not a string: ", quote_bounded(value.dump()));
    out[key] = value.get<std::string>();
  }
  return out;
}

// The top-level names of a JSON object in file order, from a SAX pass (linear; nlohmann's
// parse callback is not: each nested object's end scans its parent for discarded values).
class TopLevelKeys : public nlohmann::json_sax<Json> {
 public:
  std::vector<std::string> keys;
  std::set<std::string> seen;
  std::string duplicate;
  bool too_many = false;

  bool key(string_t& k) override {
    if (depth_ != 1) return true;
    if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    keys.push_back(k);
    too_many = keys.size() > kMaxTensors + 1;  // + "__metadata__"
    return !too_many;
  }
  bool start_object(std::size_t) override { return ++depth_, true; }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return ++depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;  // the DOM parse below reports it
  }

 private:
  int depth_ = 0;
};

// Parses the JSON header into `header` and its top-level names in file order, refusing
// duplicate names (the parser itself would silently keep the last one), hostile nesting and
// more than kMaxTensors entries.
void parse_json(const Ctx& c, const char* text, size_t size, Json* header,
                std::vector<std::string>* keys) {
  if (const int depth = json_nesting_depth({text, size}, kMaxHeaderDepth + 1);
      depth > kMaxHeaderDepth)
    KIRI_RAISE(kCheckpoint, c.prefix(), "the header nests more than ", kMaxHeaderDepth,
               " levels deep (a valid one nests 3)");
  TopLevelKeys sax;
  Json::sax_parse(text, text + size, &sax);
  if (sax.too_many)
    KIRI_RAISE(kCheckpoint, c.prefix(), "the header holds more than ", kMaxTensors, " tensors");
  try {
    *header = Json::parse(text, text + size);
  } catch (const Json::exception& e) {
    KIRI_RAISE(kCheckpoint, c.prefix(), "the ", size,
               "-byte header is not valid JSON: ", quote_bounded(e.what(), 300));
  }
  if (!sax.duplicate.empty())
    KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", quote_bounded(sax.duplicate),
               "' appears twice in the header");
  if (!header->is_object())
    KIRI_RAISE(kCheckpoint, c.prefix(), "the header is not a JSON object but ",
               header->type_name());
  *keys = std::move(sax.keys);
}

}  // namespace

void SafetensorsFile::load_header(const char* json, size_t json_size, uint64_t data_size) {
  const Ctx c{path_};
  Json header;
  std::vector<std::string> keys;
  parse_json(c, json, json_size, &header, &keys);
  for (const std::string& name : keys) {
    const Json& entry = header.at(name);
    if (name == kMetadataKey) {
      metadata_ = parse_metadata(c, entry);
      continue;
    }
    if (!entry.is_object())
      KIRI_RAISE(kCheckpoint, c.prefix(), "tensor '", quote_bounded(name),
                 "' is not an object: ", quote_bounded(entry.dump()));
    TensorInfo info;
    info.dtype = parse_dtype(c, name, entry);
    uint64_t bytes = 0;
    std::tie(info.shape, bytes) = parse_shape(c, name, entry, info.dtype);
    parse_offsets(c, name, entry, bytes, data_size, &info);
    names_.push_back(name);
    infos_[name] = std::move(info);
  }
  parse_checksums();
}

// kiri.checksum declares one checksum per tensor: a tensor without one, one for a tensor the
// file lacks, a value that is not 16 hex digits or checksums without the declaration (a
// damaged key would otherwise turn the checks off) are errors.
void SafetensorsFile::parse_checksums() {
  const std::string prefix = kChecksumPrefix;
  const auto declared = metadata_.find(kChecksumKey);
  size_t found = 0;
  for (const auto& [key, value] : metadata_) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string name = key.substr(prefix.size());
    if (declared == metadata_.end())
      KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": metadata '", quote_bounded(key, 200),
                 "' is a checksum, but the file does not declare checksums ('", kChecksumKey,
                 "' is missing): its header is damaged");
    const auto it = infos_.find(name);
    if (it == infos_.end())
      KIRI_RAISE(kCheckpoint, "safetensors file ", path_,
                 ": metadata holds a checksum for tensor '", quote_bounded(name, 200),
                 "', which the file does not hold");
    if (value.size() != 16 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
      KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": the checksum of tensor '", name,
                 "' is '", quote_bounded(value, 80), "', not 16 lowercase hex digits");
    it->second.checksum = std::stoull(value, nullptr, 16);
    ++found;
  }
  if (declared == metadata_.end()) return;
  if (declared->second != kChecksumAlgorithm)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": '", kChecksumKey, "' is '",
               quote_bounded(declared->second, 80), "', kiri checks '", kChecksumAlgorithm, "'");
  if (found != names_.size())
    for (const std::string& name : names_)
      if (!infos_.at(name).checksum)
        KIRI_RAISE(kCheckpoint, "safetensors file ", path_,
                   " declares per-tensor checksums, but has none for tensor '", name, "'");
  has_checksums_ = true;
}

void SafetensorsFile::verify(const std::string& name) const {
  const TensorInfo& i = info(name);
  if (!i.checksum) return;
  std::lock_guard<std::mutex> lock(verified_->mutex);
  if (verified_->names.count(name)) return;
  const uint64_t got = checksum_of(data_of(i), i.end - i.begin);
  if (got != *i.checksum)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", name,
               "' fails its checksum: the header says xxh3_64 ", checksum_hex(*i.checksum),
               ", its ", i.end - i.begin, " data bytes hash to ", checksum_hex(got),
               " (the file is damaged)");
  verified_->names.insert(name);
}

// The tensors must tile the data exactly: sorted by offset, each begins
// where the previous one ended, the first at 0 and the last at the end.
void SafetensorsFile::check_layout(uint64_t data_size) const {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const std::string& name : names_) {
    const TensorInfo& i = infos_.at(name);
    spans.emplace_back(i.begin, i.end, &name);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t expected = 0;
  const std::string* previous = nullptr;
  for (const auto& [begin, end, name] : spans) {
    if (begin < expected)
      KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", *name, "' at [", begin,
                 ", ", end, ") overlaps tensor '", *previous, "' which ends at ", expected);
    if (begin > expected)
      KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": data bytes [", expected, ", ", begin,
                 ") before tensor '", *name, "' belong to no tensor");
    expected = end;
    previous = name;
  }
  if (expected != data_size)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": ", data_size - expected,
               " trailing data bytes after the last tensor (tensors end at ", expected, " of ",
               data_size, ")");
}

// Validates the prefix and the header before reading the (possibly large)
// data into a 64-byte aligned buffer.
void SafetensorsFile::load(uint64_t total, const ReadAt& read_at, int map_fd) {
  if (total < 8)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, " is ", total,
               " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  read_at(0, 8, reinterpret_cast<char*>(&n));
  if (n > total - 8)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": header length ", n,
               " is larger than the ", total - 8, " bytes after it (truncated or not safetensors)");
  if (n > kMaxHeaderBytes)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": header length ", n, " exceeds the ",
               kMaxHeaderBytes, "-byte limit");
  std::string header(n, '\0');
  read_at(8, n, header.data());
  header_digest_ = checksum_of(header.data(), header.size());
  const uint64_t data_size = total - 8 - n;
  load_header(header.data(), header.size(), data_size);
  check_layout(data_size);
  if (map_fd >= 0 && data_size > 0 && (8 + n) % 8 == 0) {
    void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE, map_fd, 0);
    if (p != MAP_FAILED) {
      buffer_ =
          std::shared_ptr<char[]>(static_cast<char*>(p), [total](char* q) { ::munmap(q, total); });
      data_ = buffer_.get() + 8 + n;
      mapped_ = true;
      if (const int fd = ::dup(map_fd); fd >= 0)  // without it release() still drops the pages
        map_fd_ = std::shared_ptr<int>(new int(fd), [](int* q) {
          ::close(*q);
          delete q;
        });
      return;
    }
  }
  buffer_ = aligned_buffer(data_size);
  read_at(8 + n, data_size, buffer_.get());
  data_ = buffer_.get();
}

SafetensorsFile SafetensorsFile::parse(const std::string& bytes, const std::string& label) {
  SafetensorsFile f;
  f.path_ = label;
  f.load(bytes.size(),
         [&](uint64_t offset, size_t n, char* dst) { std::memcpy(dst, bytes.data() + offset, n); });
  return f;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return open_file(path, false);
}

SafetensorsFile SafetensorsFile::map(const std::string& path) {
  return open_file(path, true);
}

SafetensorsFile SafetensorsFile::open_file(const std::string& path, bool mapped) {
  // A FIFO or device as the file would block open() or read forever.
  const int fd = open_regular_file(path, ErrorKind::kCheckpoint, "safetensors file");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) KIRI_RAISE(kIo, "cannot stat ", path, ": ", std::strerror(errno));
  ReadAt read_at = [&](uint64_t offset, size_t n, char* dst) {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, dst + done, std::min<size_t>(n - done, 1u << 30),
                                static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) KIRI_RAISE(kIo, "read of ", path, " failed: ", std::strerror(errno));
      if (r == 0)
        KIRI_RAISE(kCheckpoint, "safetensors file ", path, " shrank while being read (at byte ",
                   offset + done, ")");
      done += static_cast<size_t>(r);
    }
  };
  SafetensorsFile f;
  f.path_ = path;
  f.load(static_cast<uint64_t>(st.st_size), read_at, mapped ? fd : -1);
  return f;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end())
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, " has no tensor '", name, "' (it has ",
               names_.size(), " tensors)");
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo& i = info(name);
  if (i.begin % dtype_size(i.dtype) != 0)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", name, "' (",
               dtype_name(i.dtype), ") starts at data offset ", i.begin,
               ", not aligned for a view; use read_into");
  verify(name);
  return Tensor::borrow(const_cast<char*>(data_of(i)), i.shape, i.dtype);
}

void SafetensorsFile::read_into(const std::string& name, Tensor& dst) const {
  const TensorInfo& i = info(name);
  if (!dst.defined())
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": cannot read tensor '", name,
               "' into an undefined tensor");
  if (i.dtype != dst.dtype() || i.shape != dst.shape())
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", name, "': expected ",
               dtype_name(dst.dtype()), " ", dst.shape().str(), ", found ", dtype_name(i.dtype),
               " ", i.shape.str());
  verify(name);
  copy_bytes(dst.raw(), dst.device(), data_of(i), Device::kHost, dst.nbytes());
}

void SafetensorsFile::read_into_converting(const std::string& name, Tensor& dst) const {
  const TensorInfo& i = info(name);
  if (!dst.defined() || i.dtype == dst.dtype()) return read_into(name, dst);
  if (i.shape != dst.shape() || !is_float(i.dtype) || !is_float(dst.dtype()))
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", name, "': expected ",
               dtype_name(dst.dtype()), " ", dst.shape().str(), " (or another float dtype), found ",
               dtype_name(i.dtype), " ", i.shape.str());
  verify(name);
  // copy_from reads through typed pointers; stage unaligned data first.
  std::shared_ptr<char[]> staged;
  const char* src = data_of(i);
  if (i.begin % dtype_size(i.dtype) != 0) {
    staged = aligned_buffer(i.end - i.begin);
    std::memcpy(staged.get(), src, i.end - i.begin);
    src = staged.get();
  }
  dst.copy_from(Tensor::borrow(const_cast<char*>(src), i.shape, i.dtype));
}

void SafetensorsFile::read_range(const std::string& name, int64_t first, Tensor& dst) const {
  const TensorInfo& i = info(name);
  const int64_t n = dst.defined() ? dst.numel() : 0, total = i.shape.numel();
  if (first < 0 || first > total || n > total - first)
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": elements [", first, ", ", first + n,
               ") of tensor '", name, "' lie outside its ", total, " elements");
  if (n == 0) return;
  if (i.dtype != dst.dtype() && (!is_float(i.dtype) || !is_float(dst.dtype())))
    KIRI_RAISE(kCheckpoint, "safetensors file ", path_, ": tensor '", name, "' is ",
               dtype_name(i.dtype), ", cannot read it as ", dtype_name(dst.dtype()));
  verify(name);  // the whole tensor, once: a damaged byte outside the range still counts
  const size_t size = dtype_size(i.dtype), bytes = static_cast<size_t>(n) * size;
  const char* src = data_of(i) + static_cast<size_t>(first) * size;
  if (i.dtype == dst.dtype()) {
    copy_bytes(dst.raw(), dst.device(), src, Device::kHost, bytes);
    return;
  }
  std::shared_ptr<char[]> staged;  // copy_from reads through typed pointers
  if (i.begin % size != 0) {
    staged = aligned_buffer(bytes);
    std::memcpy(staged.get(), src, bytes);
    src = staged.get();
  }
  dst.copy_from(Tensor::borrow(const_cast<char*>(src), dst.shape(), i.dtype));
}

void SafetensorsFile::release(const std::string& name) const {
  if (!mapped_) return;
  const TensorInfo& i = info(name);
  if (i.end == i.begin) return;
  // Whole pages only: a page shared with a neighbour is dropped too, and faulted in again
  // from the file if that neighbour is read (nothing kiri maps is written).
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t base = static_cast<uint64_t>(data_ - buffer_.get());
  const uint64_t lo = (base + i.begin) / page * page, hi = base + i.end;
  ::madvise(buffer_.get() + lo, hi - lo, MADV_DONTNEED);
  if (map_fd_)
    ::posix_fadvise(*map_fd_, static_cast<off_t>(lo), static_cast<off_t>(hi - lo),
                    POSIX_FADV_DONTNEED);
}

}  // namespace kiri::ckpt
