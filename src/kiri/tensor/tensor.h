#pragma once
// A Tensor is a shape and a dtype over contiguous storage. Storage comes from
// an Allocator and carries its category; views share the storage. Strides are
// always row-major: a view is a contiguous range of its storage.
#include <cstdint>
#include <memory>

#include "kiri/base/error.h"
#include "kiri/tensor/allocator.h"
#include "kiri/tensor/dtype.h"
#include "kiri/tensor/shape.h"

namespace kiri {

class Storage {
 public:
  // Owned: from an allocator, returned on destruction.
  Storage(Allocator& allocator, size_t bytes, Category category);
  // Borrowed: memory that someone else owns (a mapped file, a caller's buffer).
  Storage(void* data, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Category category() const { return category_; }
  bool owned() const { return allocator_ != nullptr; }
  // Where the bytes live: the allocator's device; borrowed memory is the host's.
  Device device() const { return allocator_ ? allocator_->device() : Device::kHost; }

 private:
  std::shared_ptr<AllocatorCore> allocator_;  // null when borrowed
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Category category_ = Category::kOther;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Category category, Allocator& allocator);
  static Tensor zeros(const Shape& shape, DType dtype, Category category, Allocator& allocator);
  // A view over memory kiri does not own; the caller keeps it alive.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_[i]; }
  size_t rank() const { return shape_.rank(); }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Category category() const { return storage_ ? storage_->category() : Category::kOther; }
  Device device() const { return storage_ ? storage_->device() : Device::kHost; }

  void* raw() const {
    return static_cast<char*>(storage_->data()) +
           offset_ * static_cast<int64_t>(dtype_size(dtype_));
  }
  template <typename T>
  T* data() const {
    KIRI_CHECK(dtype_ == dtype_of<T>(), "tensor is ", dtype_name(dtype_), ", accessed as ",
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // The same elements under another shape (numel must match).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) of the first dimension.
  Tensor slice(int64_t begin, int64_t end) const;
  // Elements [offset, offset + count) of the flattened tensor, as 1-D.
  Tensor flat_range(int64_t offset, int64_t count) const;

  void zero_();
  void fill_(double value);
  // Copies from a tensor of the same numel, converting the dtype if needed.
  void copy_from(const Tensor& src);
  // Element i converted to double (for tests and reports; slow).
  double item(int64_t i) const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace kiri
