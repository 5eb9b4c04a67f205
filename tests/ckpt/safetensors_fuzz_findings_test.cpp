// What the safetensors fuzz target (fuzz/, docs/fuzzing.md) found, kept fixed: each input
// is refused with a named kCheckpoint error.
#include <gtest/gtest.h>

#include <string>

#include "ckpt/test_util.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::ckpt {
namespace {

using testing::expect_refused;
using testing::make_file;

// A shape holding 0 bytes whose element count overflows int64 before the 0 ([2^62, 3, 0])
// was accepted, and Shape::numel then overflowed (UBSan: signed integer overflow).
TEST(SafetensorsFuzzFindings, ElementCountOverflowBeforeAZeroIsRefused) {
  for (const std::string shape :
       {"[4611686018427387904,3,0]", "[3037000500,3037000500,0]", "[0,4611686018427387904,4]"}) {
    const std::string json =
        R"({"x":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,0]}})";
    if (shape[1] == '0') {  // a leading 0 keeps every product at 0: a valid empty tensor
      const SafetensorsFile f = SafetensorsFile::parse(make_file(json, ""), "ok.safetensors");
      EXPECT_EQ(f.info("x").shape.numel(), 0);
      continue;
    }
    expect_refused([&] { SafetensorsFile::parse(make_file(json, ""), "big.safetensors"); },
                   {"big.safetensors", "tensor 'x'", "too large to address"});
  }
}

}  // namespace
}  // namespace kiri::ckpt
