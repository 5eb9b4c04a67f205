// The streaming writer (save_safetensors_streaming) writes save_safetensors' file byte for
// byte from pieces; a writer that appends the wrong number of bytes or fails leaves no file.
// Ranged reads (read_range) equal the whole tensor's elements, and release() drops the
// mapped pages from the page cache.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiri/ckpt/safetensors.h"
#include "test_util.h"

namespace kiri::ckpt {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Three tensors of three dtypes (one empty), counting values.
std::vector<NamedTensor> sample_tensors(Allocator& alloc) {
  Tensor a = Tensor::empty({37, 11}, DType::kF32, Category::kOther, alloc);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = 0.25f * float(i) - 7.0f;
  Tensor b = Tensor::empty({5, 3}, DType::kBF16, Category::kOther, alloc);
  b.copy_from(a.flat_range(0, 15).view({5, 3}));
  Tensor c = Tensor::empty({0, 4}, DType::kI32, Category::kOther, alloc);
  return {{"a", a}, {"b", b}, {"empty", c}};
}

std::vector<TensorSpec> specs_of(const std::vector<NamedTensor>& tensors) {
  std::vector<TensorSpec> out;
  for (const NamedTensor& t : tensors) out.push_back({t.name, t.tensor.dtype(), t.tensor.shape()});
  return out;
}

TEST(SafetensorsStream, PiecesOfAnySizeWriteTheWholeTensorWritersFile) {
  Allocator alloc;
  TempDir dir;
  const auto tensors = sample_tensors(alloc);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "3"}};
  save_safetensors(dir / "whole.safetensors", tensors, meta);
  const std::string whole = bytes_of(dir / "whole.safetensors");
  ASSERT_GT(whole.size(), 37u * 11 * 4);
  EXPECT_EQ(safetensors_header(specs_of(tensors), meta), safetensors_header(tensors, meta));
  for (size_t piece : {size_t{1}, size_t{3}, size_t{64}, size_t{1} << 20}) {
    const std::string path = dir / ("piece" + std::to_string(piece) + ".safetensors");
    size_t calls = 0;
    save_safetensors_streaming(path, specs_of(tensors), meta,
                               [&](size_t k, const AppendBytes& append) {
                                 const Tensor& t = tensors[k].tensor;
                                 const char* p = static_cast<const char*>(t.raw());
                                 for (size_t at = 0; at < t.nbytes(); at += piece)
                                   append(p + at, std::min(piece, t.nbytes() - at));
                                 ++calls;
                               });
    EXPECT_EQ(calls, 3u);
    EXPECT_EQ(bytes_of(path), whole) << "piece " << piece;
  }
}

// The error names the file, the tensor and both sizes; neither the file nor its temporary
// is left behind.
void expect_no_file(const TempDir& dir, const std::string& path, const FillTensor& fill,
                    ErrorKind kind, const std::string& part) {
  Allocator alloc;
  const auto tensors = sample_tensors(alloc);
  try {
    save_safetensors_streaming(path, specs_of(tensors), {}, fill);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 0);
}

TEST(SafetensorsStream, AWriterThatAppendsTheWrongSizeOrFailsLeavesNoFile) {
  TempDir dir;
  const std::string path = dir / "x.safetensors";
  const std::vector<char> zeros(4096, 0);
  // Too few bytes for 'a' (37 x 11 F32 = 1628 bytes).
  expect_no_file(
      dir, path, [&](size_t, const AppendBytes& append) { append(zeros.data(), 8); },
      ErrorKind::kCheckpoint, "tensor 'a' is 1628 bytes, but its writer appended only 8");
  // Too many: refused at the append that overruns, before it is written.
  expect_no_file(
      dir, path, [&](size_t, const AppendBytes& append) { append(zeros.data(), 1632); },
      ErrorKind::kCheckpoint, "tensor 'a' is 1628 bytes, but its writer appended 1632");
  // The source fails (an I/O error reading a swap file, say).
  expect_no_file(
      dir, path,
      [&](size_t k, const AppendBytes& append) {
        if (k == 1) KIRI_RAISE(kIo, "swap read failed");
        append(zeros.data(), 1628);
      },
      ErrorKind::kIo, "swap read failed");
}

TEST(SafetensorsStream, RangesEqualTheWholeTensorAndOutsideIsRefused) {
  Allocator alloc;
  TempDir dir;
  const auto tensors = sample_tensors(alloc);
  save_safetensors(dir / "t.safetensors", tensors);
  const SafetensorsFile f = SafetensorsFile::map(dir / "t.safetensors");
  ASSERT_TRUE(f.mapped());
  const Tensor a = tensors[0].tensor;
  for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{100}, int64_t{406}}) {
    Tensor part = Tensor::empty({a.numel() - first}, DType::kF32, Category::kOther, alloc);
    f.read_range("a", first, part);
    EXPECT_EQ(std::memcmp(part.raw(), a.flat_range(first, part.numel()).raw(), part.nbytes()), 0)
        << first;
  }
  // BF16 read as F32: the values the whole-tensor read gives.
  Tensor whole = Tensor::empty({5, 3}, DType::kF32, Category::kOther, alloc);
  f.read_into_converting("b", whole);
  Tensor piece = Tensor::empty({4}, DType::kF32, Category::kOther, alloc);
  f.read_range("b", 9, piece);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(piece.data<float>()[i], whole.data<float>()[9 + i]);
  try {
    f.read_range("a", 405, piece);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint);
    EXPECT_NE(std::string(e.what()).find("elements [405, 409) of tensor 'a' lie outside its 407"),
              std::string::npos)
        << e.what();
  }
  Tensor ints = Tensor::empty({0}, DType::kF32, Category::kOther, alloc);
  EXPECT_NO_THROW(f.read_range("empty", 0, ints));
}

// Pages of the file in the page cache (mincore over a fresh shared mapping).
size_t resident_pages(const std::string& path) {
  const size_t size = fs::file_size(path);
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  ::mincore(p, size, in.data());
  ::munmap(p, size);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(SafetensorsStream, ReleaseDropsAStatesPagesFromThePageCache) {
  Allocator alloc;
  TempDir dir;
  const int64_t n = int64_t{4} << 20;  // 16 MiB of F32: 4096 pages
  Tensor big = Tensor::empty({n}, DType::kF32, Category::kOther, alloc);
  for (int64_t i = 0; i < n; ++i) big.data<float>()[i] = float(i % 1000);
  const std::string path = dir / "state.safetensors";
  save_safetensors(path, {{"exp_avg", big}});
  const SafetensorsFile f = SafetensorsFile::map(path);
  Tensor piece = Tensor::empty({n / 4}, DType::kF32, Category::kOther, alloc);
  for (int64_t at = 0; at < n; at += n / 4) f.read_range("exp_avg", at, piece);
  EXPECT_GT(resident_pages(path), 4000u);  // read: in the cache
  f.release("exp_avg");
  // Written, fsynced and clean, so the kernel can drop them all (the header page may stay).
  EXPECT_LE(resident_pages(path), 2u);
  // A read after release gives the same values again.
  f.read_range("exp_avg", n - piece.numel(), piece);
  EXPECT_EQ(piece.data<float>()[piece.numel() - 1], float((n - 1) % 1000));
}

}  // namespace
}  // namespace kiri::ckpt
