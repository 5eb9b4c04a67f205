// libFuzzer target: kiri::ckpt::SafetensorsFile::parse over arbitrary bytes, then every
// accessor on every tensor the parse accepted (views, exact and converting reads).
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kiri/ckpt/safetensors.h"
#include "kiri/tensor/allocator.h"

namespace {

bool is_float(kiri::DType d) {
  using kiri::DType;
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16 || d == DType::kF64;
}

void read_every_tensor(const kiri::ckpt::SafetensorsFile& file) {
  kiri::Allocator allocator;
  for (const std::string& name : file.names()) {
    const kiri::ckpt::TensorInfo& info = file.info(name);
    kiri::fuzz::refuse_by_name([&] { (void)file.get(name); });  // unaligned: named refusal
    kiri::Tensor same =
        kiri::Tensor::empty(info.shape, info.dtype, kiri::Category::kOther, allocator);
    file.read_into(name, same);
    if (is_float(info.dtype)) {
      kiri::Tensor f32 =
          kiri::Tensor::empty(info.shape, kiri::DType::kF32, kiri::Category::kOther, allocator);
      file.read_into_converting(name, f32);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(kiri::fuzz::as_text(data, size));
  kiri::fuzz::refuse_by_name([&] {
    const auto file = kiri::ckpt::SafetensorsFile::parse(bytes, "fuzz.safetensors");
    read_every_tensor(file);
  });
  return 0;
}
