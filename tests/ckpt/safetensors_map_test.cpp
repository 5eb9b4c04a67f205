// SafetensorsFile::map: the same tensors and the same refusals as open(), from a mapping.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::ckpt {
namespace {

using testing::expect_refused;
using testing::make_file;
using testing::TempDir;

TEST(SafetensorsMap, ReadsWhatOpenReads) {
  TempDir dir;
  Allocator a;
  std::vector<NamedTensor> ts;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    Tensor f = Tensor::empty({3, 5}, DType::kF64, Category::kOther, a);
    for (int64_t i = 0; i < 15; ++i) f.data<double>()[i] = 0.5 * double(i) - 3;
    Tensor t = Tensor::empty({3, 5}, d, Category::kOther, a);
    t.copy_from(f);
    ts.push_back({std::string("t_") + dtype_name(d), t});
  }
  const std::string path = dir.path() + "/m.safetensors";
  save_safetensors(path, ts, {{"format", "pt"}});
  const SafetensorsFile opened = SafetensorsFile::open(path);
  SafetensorsFile mapped = SafetensorsFile::map(path);
  EXPECT_EQ(mapped.names(), opened.names());
  EXPECT_EQ(mapped.metadata().at("format"), "pt");
  for (const NamedTensor& t : ts) {
    const Tensor m = mapped.get(t.name);
    ASSERT_EQ(m.nbytes(), t.tensor.nbytes());
    EXPECT_EQ(std::memcmp(m.raw(), t.tensor.raw(), m.nbytes()), 0) << t.name;
    if (t.tensor.dtype() == DType::kI32) continue;
    Tensor f = Tensor::empty({3, 5}, DType::kF32, Category::kOther, a);
    mapped.read_into_converting(t.name, f);
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(f.item(i), 0.5 * double(i) - 3) << t.name;
  }
  // A private mapping: writing through a view leaves the file as it was.
  Tensor v = mapped.get("t_F32");
  v.data<float>()[0] = 99;
  EXPECT_EQ(SafetensorsFile::open(path).get("t_F32").data<float>()[0], -3.0f);
}

TEST(SafetensorsMap, RefusesWhatOpenRefuses) {
  TempDir dir;
  const std::string path = dir.path() + "/bad.safetensors";
  std::string bytes = make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                                std::string(16, '\0'));
  write_file_atomic(path, bytes.substr(0, bytes.size() - 4));
  expect_refused([&] { SafetensorsFile::map(path); }, {path, "w"});
  write_file_atomic(path, "short");
  expect_refused([&] { SafetensorsFile::map(path); }, {"too short"});
}

// A header whose length is not a multiple of 8 (legal, never written by kiri or Python)
// leaves the data unaligned in a mapping: map() reads it instead, and the values are right.
TEST(SafetensorsMap, AnUnalignedDataStartIsRead) {
  TempDir dir;
  const std::string json = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} )";
  ASSERT_NE(json.size() % 8, 0u);
  uint64_t n = json.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  const float w[2] = {1.5f, -2.0f};
  bytes += json + std::string(reinterpret_cast<const char*>(w), 8);
  const std::string path = dir.path() + "/odd.safetensors";
  write_file_atomic(path, bytes);
  const SafetensorsFile f = SafetensorsFile::map(path);
  EXPECT_EQ(f.get("w").data<float>()[0], 1.5f);
  EXPECT_EQ(f.get("w").data<float>()[1], -2.0f);
}

}  // namespace
}  // namespace kiri::ckpt
