#pragma once
// Internal to kernels: which backend computes an op, from the devices of its tensors. The
// fronts (ops.cpp, ops_gemm.cpp, ops_rows.cpp) switch on it once per op call, nothing per
// element, so the front costs nothing next to the op. A new backend (a CUDA folder beside
// cpu/) adds its Backend, its case in backend_for, and one case per op in the fronts; no
// caller changes.
#include <initializer_list>

#include "kiri/base/error.h"
#include "kiri/tensor/device.h"
#include "kiri/tensor/tensor.h"

namespace kiri::kernels::dispatch {

enum class Backend { kCpu };

// kHost and kChecked are host RAM, where the CPU kernels compute; a device without kernels
// is an error naming it and the op, raised before any byte is touched.
inline Backend backend_for(Device device, const char* op) {
  switch (device) {
    case Device::kHost:
    case Device::kChecked:
      return Backend::kCpu;
  }
  KIRI_RAISE(kInternal, op, ": no kernels compute on device ", device_name(device), " (",
             static_cast<int>(device), ")");
}

// The backend of the op's defined tensors, which must all agree (an op does not copy
// between devices: that is copy_bytes's job). No defined tensor: the CPU.
inline Backend backend_of(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  Backend backend = Backend::kCpu;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    const Backend b = backend_for(t->device(), op);
    if (first == nullptr) {
      first = t;
      backend = b;
    }
    KIRI_CHECK_KIND(kInternal, b == backend, op, ": tensors on devices ",
                    device_name(first->device()), " and ", device_name(t->device()),
                    " have different backends");
  }
  return backend;
}

// After a switch over every Backend: only a corrupt enum value gets here.
[[noreturn]] inline void no_backend(const char* op) {
  KIRI_RAISE(kInternal, op, ": no backend");
}

}  // namespace kiri::kernels::dispatch
