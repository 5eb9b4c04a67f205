// Per-tensor checksums in the safetensors metadata (ckpt/safetensors.h): written by both
// writers alike, verified on the first read of each tensor, named with the file and the
// tensor when they fail; files without them (Python's) load as before.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/safetensors.h"
#include "temp_dir.h"

namespace kiri::ckpt {
namespace {

using testing::TempDir;

Tensor filled(Allocator& a, int64_t n, float start) {
  Tensor t = Tensor::empty({n}, DType::kF32, Category::kOther, a);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Flips bit `bit` of the byte at `offset` of the file.
void flip(const std::string& path, uint64_t offset, int bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

// The offset in the file of the first data byte (after the length prefix and header).
uint64_t data_start(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  return 8 + n;
}

std::string error_of(const std::function<void()>& f) {
  ErrorKind kind{};
  const std::string e = kiri::testing::error_of(f, &kind);
  if (e.empty()) {
    ADD_FAILURE() << "no error";
  } else {
    EXPECT_EQ(kind, ErrorKind::kCheckpoint) << e;
  }
  return e;
}

TEST(SafetensorsChecksum, BothWritersWriteTheXxh3OfEachTensorAndReadItBack) {
  TempDir dir;
  Allocator a;
  const Tensor x = filled(a, 5, 1.0f), y = filled(a, 3, -2.0f);
  save_safetensors(dir / "a.safetensors", {{"x", x}, {"y", y}}, {{"format", "pt"}},
                   Checksums::kXxh3);
  const std::vector<TensorSpec> specs = {{"x", DType::kF32, Shape({5})},
                                         {"y", DType::kF32, Shape({3})}};
  save_safetensors_streaming(
      dir / "b.safetensors", specs, {{"format", "pt"}},
      [&](size_t k, const AppendBytes& append) {
        const Tensor& t = k == 0 ? x : y;
        // In two pieces: the streamed hash must equal the one-shot one.
        append(t.raw(), 4);
        append(static_cast<const char*>(t.raw()) + 4, t.nbytes() - 4);
      },
      Checksums::kXxh3);
  EXPECT_EQ(read_file(dir / "a.safetensors"), read_file(dir / "b.safetensors"));
  const SafetensorsFile f = SafetensorsFile::open(dir / "a.safetensors");
  EXPECT_TRUE(f.has_checksums());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("kiri.checksum"), "xxh3_64");
  EXPECT_EQ(f.metadata().at("kiri.xxh3_64.x"), hex(XXH3_64bits(x.raw(), 20)));
  EXPECT_EQ(f.metadata().at("kiri.xxh3_64.y"), hex(XXH3_64bits(y.raw(), 12)));
  EXPECT_EQ(f.get("y").item(2), 0.0);
}

TEST(SafetensorsChecksum, AFlippedDataBitIsNamedWithTheFileAndTheTensorOnEveryRead) {
  TempDir dir;
  Allocator a;
  save_safetensors(dir / "m.safetensors", {{"x", filled(a, 4, 1.0f)}, {"y", filled(a, 4, 5.0f)}},
                   {}, Checksums::kXxh3);
  flip(dir / "m.safetensors", data_start(dir / "m.safetensors") + 16 + 2, 3);  // y's element 0
  for (const bool mapped : {false, true}) {
    const SafetensorsFile f = mapped ? SafetensorsFile::map(dir / "m.safetensors")
                                     : SafetensorsFile::open(dir / "m.safetensors");
    Tensor dst = Tensor::empty({1}, DType::kF32, Category::kOther, a);
    f.read_range("x", 0, dst);  // x is intact
    EXPECT_EQ(dst.item(0), 1.0);
    // Element 3 of y is intact, but the tensor as a whole is not: refused.
    const std::string e = error_of([&] { f.read_range("y", 3, dst); });
    EXPECT_NE(e.find("safetensors file " + dir / "m.safetensors" +
                     ": tensor 'y' fails its checksum: the header says xxh3_64 "),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("its 16 data bytes hash to "), std::string::npos) << e;
    EXPECT_NE(error_of([&] { f.get("y"); }).find("tensor 'y' fails its checksum"),
              std::string::npos);
  }
}

TEST(SafetensorsChecksum, FilesWithoutChecksumsLoadUnverified) {
  TempDir dir;
  Allocator a;
  save_safetensors(dir / "py.safetensors", {{"x", filled(a, 4, 1.0f)}}, {{"format", "pt"}});
  flip(dir / "py.safetensors", data_start(dir / "py.safetensors"), 0);
  const SafetensorsFile f = SafetensorsFile::open(dir / "py.safetensors");
  EXPECT_FALSE(f.has_checksums());
  EXPECT_NE(f.get("x").item(0), 1.0);  // nothing to check it against
}

// A header written by hand: `meta` is the __metadata__ object's JSON.
std::string file_with_metadata(const std::string& meta) {
  std::string json = R"({"__metadata__":)" + meta +
                     R"(,"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t n = json.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + json + std::string(8, '\0');
}

TEST(SafetensorsChecksum, ADeclaredFileWithoutEveryChecksumIsRefusedByName) {
  const std::string zero = hex(XXH3_64bits("\0\0\0\0", 4));
  const auto refused = [](const std::string& meta) {
    return error_of([&] { SafetensorsFile::parse(file_with_metadata(meta), "f.safetensors"); });
  };
  EXPECT_NE(refused(R"({"kiri.checksum":"xxh3_64","kiri.xxh3_64.x":")" + zero + "\"}")
                .find("safetensors file f.safetensors declares per-tensor checksums, but has "
                      "none for tensor 'y'"),
            std::string::npos);
  // A damaged declaration must not turn the checks off.
  EXPECT_NE(refused(R"({"kiri.checksuo":"xxh3_64","kiri.xxh3_64.x":")" + zero + "\"}")
                .find("metadata 'kiri.xxh3_64.x' is a checksum, but the file does not declare "
                      "checksums ('kiri.checksum' is missing)"),
            std::string::npos);
  EXPECT_NE(refused(R"({"kiri.checksum":"xxh3_65","kiri.xxh3_64.x":")" + zero +
                    R"(","kiri.xxh3_64.y":")" + zero + "\"}")
                .find("'kiri.checksum' is 'xxh3_65', kiri checks 'xxh3_64'"),
            std::string::npos);
  EXPECT_NE(refused(R"({"kiri.checksum":"xxh3_64","kiri.xxh3_64.x":"12","kiri.xxh3_64.y":")" +
                    zero + "\"}")
                .find("the checksum of tensor 'x' is '12', not 16 lowercase hex digits"),
            std::string::npos);
  EXPECT_NE(refused(R"({"kiri.checksum":"xxh3_64","kiri.xxh3_64.x":")" + zero +
                    R"(","kiri.xxh3_64.y":")" + zero + R"(","kiri.xxh3_64.z":")" + zero + "\"}")
                .find("holds a checksum for tensor 'z', which the file does not hold"),
            std::string::npos);
  // Both present and right: loads and verifies.
  const SafetensorsFile f =
      SafetensorsFile::parse(file_with_metadata(R"({"kiri.checksum":"xxh3_64","kiri.xxh3_64.x":")" +
                                                zero + R"(","kiri.xxh3_64.y":")" + zero + "\"}"),
                             "f.safetensors");
  EXPECT_EQ(f.get("y").item(0), 0.0);
}

}  // namespace
}  // namespace kiri::ckpt
