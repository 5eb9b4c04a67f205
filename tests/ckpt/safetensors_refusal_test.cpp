// Every defect SafetensorsFile::open must refuse, each with a message naming
// the file (and the tensor), and no input that crashes it.
#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/test_util.h"
#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::ckpt {
namespace {

using testing::expect_refused;
using testing::make_file;
using testing::TempDir;

const std::string kLabel = "bad.safetensors";

void expect_parse_refused(const std::string& bytes, std::vector<std::string> parts) {
  parts.push_back(kLabel);  // every message names the file
  expect_refused([&] { SafetensorsFile::parse(bytes, kLabel); }, parts);
}

// Two F32 tensors and metadata: a small valid file to damage.
std::string small_file() {
  Allocator a;
  Tensor x = Tensor::empty({2}, DType::kF32, Category::kOther, a);
  Tensor y = Tensor::empty({1, 3}, DType::kBF16, Category::kOther, a);
  x.fill_(1.5);
  y.fill_(-2);
  std::vector<NamedTensor> ts = {{"x", x}, {"y", y}};
  return safetensors_header(ts, {{"format", "pt"}}) + std::string(static_cast<char*>(x.raw()), 8) +
         std::string(static_cast<char*>(y.raw()), 6);
}

TEST(SafetensorsRefusal, EveryTruncationIsRefused) {
  const std::string full = small_file();
  SafetensorsFile::parse(full, kLabel);  // the whole file is fine
  for (size_t n = 0; n < full.size(); ++n) {
    try {
      SafetensorsFile::parse(full.substr(0, n), kLabel);
      ADD_FAILURE() << "truncation to " << n << " of " << full.size() << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << n << ": " << e.what();
      EXPECT_NE(e.message().find(kLabel), std::string::npos) << e.message();
    }
  }
}

TEST(SafetensorsRefusal, TruncatedFilesOnDiskAreRefused) {
  TempDir dir;
  const std::string full = small_file();
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{20}, full.size() - 1}) {
    const std::string path = dir / ("t" + std::to_string(n));
    write_file_atomic(path, full.substr(0, n));
    expect_refused([&] { SafetensorsFile::open(path); }, {path});
  }
}

TEST(SafetensorsRefusal, NoSingleByteFlipCrashes) {
  // Flips in the data are undetectable (no checksum in the format); flips in
  // the prefix or header must be refused or yield a consistent file.
  const std::string full = small_file();
  for (size_t i = 0; i < full.size(); ++i) {
    for (unsigned char mask : {0x01, 0x20, 0x80}) {
      std::string bad = full;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      try {
        SafetensorsFile f = SafetensorsFile::parse(bad, kLabel);
        for (const std::string& name : f.names()) (void)f.info(name);
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << i << ": " << e.what();
      }
    }
  }
}

TEST(SafetensorsRefusal, FlippedByteInHeaderJson) {
  std::string bad = small_file();
  bad[8] = '[';  // the opening brace
  expect_parse_refused(bad, {"not valid JSON"});
  bad = small_file();
  bad[bad.find("\"dtype\"")] = '\'';
  expect_parse_refused(bad, {"not valid JSON"});
}

TEST(SafetensorsRefusal, ShortAndOverlongHeaderLengths) {
  expect_parse_refused("", {"0 bytes", "too short"});
  expect_parse_refused(std::string("\1\0\0", 3), {"3 bytes", "too short"});
  std::string huge = small_file();
  const uint64_t n = uint64_t{1} << 63;
  std::memcpy(huge.data(), &n, 8);
  expect_parse_refused(huge, {"header length 9223372036854775808", "larger than"});
  std::string max = small_file();
  std::memset(max.data(), 0xff, 8);
  expect_parse_refused(max, {"header length 18446744073709551615"});
}

TEST(SafetensorsRefusal, HeaderStructure) {
  expect_parse_refused(make_file("[1, 2]", ""), {"not a JSON object"});
  expect_parse_refused(make_file(R"({"x": 3})", ""), {"'x'", "not an object"});
  expect_parse_refused(make_file(R"({"__metadata__": [1]})", ""), {"__metadata__"});
  expect_parse_refused(make_file(R"({"__metadata__": {"k": 1}})", ""), {"'k'", "not a string"});
  expect_parse_refused(make_file(R"({"x":{"shape":[],"data_offsets":[0,4]}})", std::string(4, 0)),
                       {"'x'", "dtype"});
}

TEST(SafetensorsRefusal, UnknownDType) {
  expect_parse_refused(
      make_file(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, 0)),
      {"'x'", "unsupported dtype 'I64'"});
}

TEST(SafetensorsRefusal, BadShapes) {
  const std::string data(8, 0);
  for (const char* shape : {"[-1]", "[1.5]", "[\"2\"]", "3", "[4611686018427387905]"})
    expect_parse_refused(make_file(std::string(R"({"x":{"dtype":"F32","shape":)") + shape +
                                       R"(,"data_offsets":[0,8]}})",
                                   data),
                         {"'x'", "shape"});
  // Dimensions whose product overflows.
  expect_parse_refused(
      make_file(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                data),
      {"'x'", "too large"});
}

TEST(SafetensorsRefusal, OffsetsNotMatchingDTypeSize) {
  expect_parse_refused(
      make_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::string(4, 0)),
      {"'x'", "F32 [2] = 8 bytes", "span 4"});
  expect_parse_refused(
      make_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, 0)),
      {"'x'", "begin after end"});
  for (const char* offsets : {"[0]", "[0,4,8]", "[-4,0]", "[0,\"4\"]", "{}"})
    expect_parse_refused(
        make_file(
            std::string(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":)") + offsets + "}}",
            std::string(4, 0)),
        {"'x'", "data_offsets"});
}

TEST(SafetensorsRefusal, OffsetsOutOfRangeOverlappingOrWithGaps) {
  const char* two = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[%A]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[%B]}})";
  auto file = [&](const std::string& a, const std::string& b, size_t data) {
    std::string json = two;
    json.replace(json.find("%A"), 2, a);
    json.replace(json.find("%B"), 2, b);
    return make_file(json, std::string(data, 0));
  };
  expect_parse_refused(file("0,8", "8,16", 12), {"'b'", "past the end of the 12 data bytes"});
  expect_parse_refused(file("0,8", "4,12", 12), {"'b'", "overlaps tensor 'a'"});
  expect_parse_refused(file("0,8", "0,8", 8), {"overlaps"});
  expect_parse_refused(file("0,8", "12,20", 20), {"[8, 12)", "'b'", "belong to no tensor"});
  expect_parse_refused(file("8,16", "16,24", 24), {"[0, 8)", "'a'"});
  expect_parse_refused(file("0,8", "8,16", 20), {"4 trailing data bytes"});
  SafetensorsFile::parse(file("8,16", "0,8", 16), kLabel);  // any order on disk is fine
}

TEST(SafetensorsRefusal, DuplicateNames) {
  expect_parse_refused(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                 R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                 std::string(2, 0)),
                       {"'a'", "twice"});
}

TEST(SafetensorsRefusal, OpenOfMissingFileIsIoError) {
  TempDir dir;
  try {
    SafetensorsFile::open(dir / "none.safetensors");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("none.safetensors"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiri::ckpt
