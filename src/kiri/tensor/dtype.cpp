#include "kiri/tensor/dtype.h"

#include "kiri/base/error.h"

namespace kiri {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kF64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kU16:
      return 2;
    case DType::kU8:
      return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kF64:
      return "F64";
    case DType::kI32:
      return "I32";
    case DType::kU16:
      return "U16";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType d :
       {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI32, DType::kU16, DType::kU8})
    if (name == dtype_name(d)) return d;
  KIRI_RAISE(kInvalidArgument, "unknown dtype '", name,
             "' (known: F32, BF16, F16, F64, I32, U16, U8)");
}

}  // namespace kiri
