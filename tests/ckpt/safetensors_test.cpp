#include "kiri/ckpt/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"

namespace kiri::ckpt {
namespace {

using testing::expect_refused;
using testing::list_dir;
using testing::make_file;
using testing::TempDir;

// The file Python's safetensors writes for
//   save_file({"weight": torch.tensor([1.0, 2.0])}, path, metadata={"format": "pt"}):
// u64 header length 96, compact JSON with __metadata__ first, 6 spaces of
// padding, then 1.0f and 2.0f little-endian.
const std::string kPythonFile = std::string("\x60\0\0\0\0\0\0\0", 8) +
                                R"({"__metadata__":{"format":"pt"},)"
                                R"("weight":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"
                                "      " +
                                std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8);

Tensor arange(Allocator& a, const Shape& shape, DType dtype, double start = 0) {
  Tensor t = Tensor::empty(shape, dtype, Category::kOther, a);
  Tensor f = Tensor::empty(shape, DType::kF64, Category::kOther, a);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<double>()[i] = start + static_cast<double>(i);
  t.copy_from(f);
  return t;
}

TEST(Safetensors, WritesExactlyWhatPythonWrites) {
  TempDir dir;
  Allocator a;
  Tensor w = Tensor::empty({2}, DType::kF32, Category::kParameters, a);
  w.data<float>()[0] = 1.0f;
  w.data<float>()[1] = 2.0f;
  save_safetensors(dir / "w.safetensors", {{"weight", w}}, {{"format", "pt"}});
  EXPECT_EQ(read_file(dir / "w.safetensors"), kPythonFile);
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"w.safetensors"});  // no temp left
}

TEST(Safetensors, ReadsWhatPythonWrites) {
  TempDir dir;
  write_file_atomic(dir / "py.safetensors", kPythonFile);
  SafetensorsFile f = SafetensorsFile::open(dir / "py.safetensors");
  EXPECT_EQ(f.names(), std::vector<std::string>{"weight"});
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.info("weight").dtype, DType::kF32);
  EXPECT_EQ(f.info("weight").shape, Shape{2});
  Tensor t = f.get("weight");
  EXPECT_EQ(t.item(0), 1.0);
  EXPECT_EQ(t.item(1), 2.0);
}

TEST(Safetensors, NoMetadataWritesNoMetadataKey) {
  Allocator a;
  const std::string header = safetensors_header({{"x", arange(a, {1}, DType::kU8)}}, {});
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
  EXPECT_EQ(header.size() % 8, 0u);
}

TEST(Safetensors, RoundTripsEveryDTypeAndShapeInOrder) {
  TempDir dir;
  Allocator a;
  std::vector<NamedTensor> tensors = {
      {"zeta.f32", arange(a, {2, 3}, DType::kF32, -2)},
      {"alpha.bf16", arange(a, {4}, DType::kBF16, 1)},
      {"f16", arange(a, {1, 2, 2}, DType::kF16, 3)},
      {"f64", arange(a, {3}, DType::kF64, 0.5)},
      {"empty", Tensor::empty({0, 4}, DType::kF32, Category::kOther, a)},
      {"scalar", arange(a, Shape{}, DType::kI32, 7)},
      {"i32", arange(a, {5}, DType::kI32, -3)},
      {"u16", arange(a, {2}, DType::kU16, 65534)},
      {"u8", arange(a, {3}, DType::kU8, 250)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "100"}};
  save_safetensors(dir / "all.safetensors", tensors, meta);

  SafetensorsFile f = SafetensorsFile::open(dir / "all.safetensors");
  ASSERT_EQ(f.names().size(), tensors.size());
  EXPECT_EQ(f.metadata(), meta);
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& want = tensors[k].tensor;
    EXPECT_EQ(f.names()[k], tensors[k].name);  // the order given, not sorted
    EXPECT_TRUE(f.has(tensors[k].name));
    Tensor got = f.get(tensors[k].name);
    EXPECT_EQ(got.dtype(), want.dtype()) << tensors[k].name;
    EXPECT_EQ(got.shape(), want.shape()) << tensors[k].name;
    ASSERT_EQ(got.nbytes(), want.nbytes());
    if (want.nbytes()) {
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
    }

    Tensor copy = Tensor::empty(want.shape(), want.dtype(), Category::kOther, a);
    f.read_into(tensors[k].name, copy);
    if (want.nbytes()) {
      EXPECT_EQ(std::memcmp(copy.raw(), want.raw(), want.nbytes()), 0);
    }
  }
  EXPECT_FALSE(f.has("missing"));
  expect_refused([&] { f.info("missing"); }, {"missing", "all.safetensors"});
}

TEST(Safetensors, ViewsSurviveMovingTheFile) {
  Allocator a;
  Tensor w = arange(a, {4}, DType::kF32, 10);
  const std::string bytes =
      safetensors_header({{"w", w}}, {}) + std::string(static_cast<char*>(w.raw()), 16);
  SafetensorsFile f = SafetensorsFile::parse(bytes, "mem");
  Tensor view = f.get("w");
  SafetensorsFile moved = std::move(f);
  EXPECT_EQ(view.item(3), 13.0);
  EXPECT_EQ(moved.get("w").raw(), view.raw());
}

TEST(Safetensors, ReadIntoRefusesDTypeOrShapeMismatch) {
  Allocator a;
  Tensor w = arange(a, {2, 3}, DType::kF32);
  const std::string bytes =
      safetensors_header({{"w", w}}, {}) + std::string(static_cast<char*>(w.raw()), w.nbytes());
  SafetensorsFile f = SafetensorsFile::parse(bytes, "m.safetensors");
  Tensor wrong_shape = Tensor::empty({3, 2}, DType::kF32, Category::kOther, a);
  expect_refused([&] { f.read_into("w", wrong_shape); },
                 {"m.safetensors", "'w'", "expected F32 [3, 2]", "found F32 [2, 3]"});
  Tensor wrong_dtype = Tensor::empty({2, 3}, DType::kBF16, Category::kOther, a);
  expect_refused([&] { f.read_into("w", wrong_dtype); },
                 {"'w'", "expected BF16 [2, 3]", "found F32 [2, 3]"});
  Tensor ints = Tensor::empty({2, 3}, DType::kI32, Category::kOther, a);
  expect_refused([&] { f.read_into_converting("w", ints); }, {"expected I32", "found F32"});
  expect_refused([&] { f.read_into_converting("w", wrong_shape); }, {"[3, 2]", "[2, 3]"});
}

TEST(Safetensors, ReadIntoConvertingBetweenFloatDTypes) {
  Allocator a;
  Tensor w = arange(a, {2, 3}, DType::kF32, -1);
  const std::string bytes =
      safetensors_header({{"w", w}}, {}) + std::string(static_cast<char*>(w.raw()), w.nbytes());
  SafetensorsFile f = SafetensorsFile::parse(bytes, "m");
  for (DType d : {DType::kBF16, DType::kF16, DType::kF64, DType::kF32}) {
    Tensor dst = Tensor::empty({2, 3}, d, Category::kOther, a);
    f.read_into_converting("w", dst);
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(dst.item(i), static_cast<double>(i - 1));
  }
  // And back: a BF16 file into F32.
  Tensor h = arange(a, {3}, DType::kBF16, 5);
  const std::string hb =
      safetensors_header({{"h", h}}, {}) + std::string(static_cast<char*>(h.raw()), h.nbytes());
  Tensor f32 = Tensor::empty({3}, DType::kF32, Category::kOther, a);
  SafetensorsFile::parse(hb, "h").read_into_converting("h", f32);
  EXPECT_EQ(f32.item(2), 7.0);
}

TEST(Safetensors, UnalignedTensorsReadButDoNotView) {
  // Legal in the format: 3 bytes of U8 push the F32 tensor to offset 3.
  const std::string data = std::string("\1\2\3", 3) + std::string("\x00\x00\x80\x3f", 4);
  const std::string bytes = make_file(R"({"b":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                                      R"("f":{"dtype":"F32","shape":[1],"data_offsets":[3,7]}})",
                                      data);
  SafetensorsFile f = SafetensorsFile::parse(bytes, "u");
  expect_refused([&] { f.get("f"); }, {"'f'", "offset 3", "read_into"});
  Allocator a;
  Tensor dst = Tensor::empty({1}, DType::kF32, Category::kOther, a);
  f.read_into("f", dst);
  EXPECT_EQ(dst.item(0), 1.0);
  Tensor bf = Tensor::empty({1}, DType::kBF16, Category::kOther, a);
  f.read_into_converting("f", bf);
  EXPECT_EQ(bf.item(0), 1.0);
  EXPECT_EQ(f.get("b").item(2), 3.0);
}

TEST(Safetensors, SaveRefusesBadNames) {
  TempDir dir;
  Allocator a;
  Tensor t = arange(a, {1}, DType::kF32);
  expect_refused([&] { save_safetensors(dir / "x", {{"a", t}, {"a", t}}); }, {"'a'", "twice"});
  expect_refused([&] { save_safetensors(dir / "x", {{"__metadata__", t}}); }, {"reserved"});
  expect_refused([&] { save_safetensors(dir / "x", {{"u", Tensor()}}); }, {"'u'", "undefined"});
  EXPECT_TRUE(list_dir(dir.path()).empty());
}

}  // namespace
}  // namespace kiri::ckpt
