// The kernels' front dispatches on the tensors' device: host and checked memory go to the
// CPU backend, and a device without kernels is an error naming it, not a crash.
#include "kiri/kernels/dispatch.h"

#include <gtest/gtest.h>

#include <string>

#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"
#include "kiri/tensor/tensor.h"

namespace kiri {
namespace {

using kernels::dispatch::Backend;
using kernels::dispatch::backend_for;
using kernels::dispatch::backend_of;

std::string internal_error_of(Device device) {
  try {
    backend_for(device, "gelu_forward");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    return e.message();
  }
  return "";
}

TEST(KernelDispatch, HostAndCheckedMemoryGoToTheCpu) {
  EXPECT_EQ(backend_for(Device::kHost, "op"), Backend::kCpu);
  EXPECT_EQ(backend_for(Device::kChecked, "op"), Backend::kCpu);
  Allocator checked(Device::kChecked);
  const Tensor t = Tensor::zeros({2}, DType::kF32, Category::kOther, checked);
  EXPECT_EQ(backend_of("op", {&t, nullptr}), Backend::kCpu);
  EXPECT_EQ(backend_of("op", {}), Backend::kCpu);  // no tensor: the raw-pointer GEMMs' case
}

TEST(KernelDispatch, ADeviceWithoutKernelsIsAnErrorNamingIt) {
  // A value no Device names yet: what a new device would be before its backend folder.
  EXPECT_EQ(internal_error_of(static_cast<Device>(9)),
            "gelu_forward: no kernels compute on device ? (9)");
}

TEST(KernelDispatch, TheFrontComputesOnTheCheckedDeviceAsOnTheHost) {
  Allocator host, checked(Device::kChecked);
  Tensor in_h = Tensor::empty({4}, DType::kF32, Category::kOther, host);
  for (int i = 0; i < 4; ++i) in_h.data<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
  Tensor in_c = Tensor::empty({4}, DType::kF32, Category::kOther, checked);
  in_c.copy_from(in_h);
  Tensor out_h = Tensor::empty({4}, DType::kF32, Category::kOther, host);
  Tensor out_c = Tensor::empty({4}, DType::kF32, Category::kOther, checked);
  kernels::gelu_forward<float>(out_h, in_h);
  kernels::gelu_forward<float>(out_c, in_c);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out_c.data<float>()[i], out_h.data<float>()[i]) << i;
  checked.check_device();
}

}  // namespace
}  // namespace kiri
