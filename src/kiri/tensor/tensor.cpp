#include "kiri/tensor/tensor.h"

#include <cstring>

namespace kiri {

Storage::Storage(Allocator& allocator, size_t bytes, Category category)
    : allocator_(allocator.core()), bytes_(bytes), category_(category) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::Storage(void* data, size_t bytes) : data_(data), bytes_(bytes) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, bytes_, category_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Category category, Allocator& allocator) {
  for (int64_t d : shape.dims()) KIRI_CHECK(d >= 0, "negative dimension in shape ", shape.str());
  Tensor t;
  t.storage_ = std::make_shared<Storage>(
      allocator, static_cast<size_t>(shape.numel()) * dtype_size(dtype), category);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Category category, Allocator& allocator) {
  Tensor t = empty(shape, dtype, category, allocator);
  t.zero_();
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype) {
  Tensor t;
  t.storage_ =
      std::make_shared<Storage>(data, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  KIRI_CHECK(shape.numel() == numel(), "cannot view ", shape_.str(), " (", numel(),
             " elements) as ", shape.str(), " (", shape.numel(), " elements)");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  KIRI_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice [", begin, ", ",
             end, ") out of range for shape ", shape_.str());
  Tensor t = *this;
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.offset_ += begin * row;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::flat_range(int64_t offset, int64_t count) const {
  KIRI_CHECK(0 <= offset && 0 <= count && offset + count <= numel(), "flat range [", offset, ", ",
             offset + count, ") out of range for ", numel(), " elements");
  Tensor t = *this;
  t.offset_ += offset;
  t.shape_ = Shape{count};
  return t;
}

void Tensor::zero_() {
  if (numel() > 0) std::memset(raw(), 0, nbytes());
}

namespace {
double load(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF64:
      return static_cast<const double*>(p)[i];
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(p)[i];
    case DType::kU16:
      return static_cast<const uint16_t*>(p)[i];
    case DType::kU8:
      return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}
void store(void* p, DType d, int64_t i, double v) {
  switch (d) {
    case DType::kF32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case DType::kI32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::kU16:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      break;
    case DType::kU8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      break;
  }
}
}  // namespace

void Tensor::fill_(double value) {
  const int64_t n = numel();
  void* p = raw();
  if (dtype_ == DType::kF32) {
    float* f = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(value);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store(p, dtype_, i, value);
}

void Tensor::copy_from(const Tensor& src) {
  KIRI_CHECK(src.numel() == numel(), "copy of ", src.numel(), " elements ", src.shape().str(),
             " into ", numel(), " elements ", shape_.str());
  if (numel() == 0) return;
  if (src.dtype() == dtype_) {
    copy_bytes(raw(), device(), src.raw(), src.device(), nbytes());
    return;
  }
  // The conversions below read and write the elements on the CPU.
  KIRI_CHECK_KIND(kInternal, host_addressable(device()) && host_addressable(src.device()),
                  "converting copy from device ", device_name(src.device()), " to device ",
                  device_name(device()), ": the CPU cannot reach their memory");
  const int64_t n = numel();
  const void* s = src.raw();
  void* d = raw();
  if (dtype_ == DType::kF32 && src.dtype() == DType::kBF16) {
    const uint16_t* h = static_cast<const uint16_t*>(s);
    float* f = static_cast<float*>(d);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) f[i] = bf16_to_float(h[i]);
    return;
  }
  if (dtype_ == DType::kBF16 && src.dtype() == DType::kF32) {
    const float* f = static_cast<const float*>(s);
    uint16_t* h = static_cast<uint16_t*>(d);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = float_to_bf16(f[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store(d, dtype_, i, load(s, src.dtype(), i));
}

double Tensor::item(int64_t i) const {
  KIRI_CHECK(0 <= i && i < numel(), "index ", i, " out of range for ", numel(), " elements");
  return load(raw(), dtype_, i);
}

}  // namespace kiri
