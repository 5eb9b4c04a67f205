// The devices behind the allocator: every tensor knows its device; the checked device
// poisons its blocks, fences them with guards, checks them and never caches.
#include "kiri/tensor/device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kiri/base/error.h"
#include "kiri/tensor/tensor.h"

namespace kiri {
namespace {

std::string internal_error_of(const Allocator& a) {
  try {
    a.check_device();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    return e.message();
  }
  return "";
}

TEST(Device, EveryTensorKnowsItsDevice) {
  Allocator host, checked(Device::kChecked);
  EXPECT_EQ(Tensor::empty({4}, DType::kF32, Category::kOther, host).device(), Device::kHost);
  const Tensor t = Tensor::empty({2, 3}, DType::kF32, Category::kOther, checked);
  EXPECT_EQ(t.device(), Device::kChecked);
  EXPECT_EQ(t.flat_range(2, 3).device(), Device::kChecked);  // views share the storage
  float x[2] = {1, 2};
  EXPECT_EQ(Tensor::borrow(x, {2}, DType::kF32).device(), Device::kHost);
  EXPECT_STREQ(device_name(Device::kChecked), "checked");
  EXPECT_EQ(host.device(), Device::kHost);
}

TEST(Device, CheckedBlocksArePoisonedAndNeverCached) {
  Allocator a(Device::kChecked);
  for (int round = 0; round < 2; ++round) {
    Tensor f = Tensor::empty({1000}, DType::kF32, Category::kActivations, a);
    Tensor h = Tensor::empty({5}, DType::kBF16, Category::kActivations, a);
    Tensor i = Tensor::empty({3}, DType::kI32, Category::kBuffers, a);
    for (int64_t k = 0; k < f.numel(); ++k) ASSERT_TRUE(std::isnan(f.data<float>()[k])) << k;
    for (int64_t k = 0; k < h.numel(); ++k) EXPECT_TRUE(std::isnan(h.item(k))) << k;
    EXPECT_EQ(i.data<int32_t>()[2], -1);
    f.data<float>()[0] = 1;  // written, then freed: the next round gets a poisoned block again
  }
  EXPECT_EQ(a.stats().cache_hits, 0);
  EXPECT_EQ(a.stats().reserved, 0);  // every block went back at once
  EXPECT_EQ(internal_error_of(a), "");
}

TEST(Device, AWritePastTheEndIsNamed) {
  Allocator a(Device::kChecked);
  Tensor t = Tensor::zeros({10}, DType::kF32, Category::kGradients, a);
  EXPECT_EQ(internal_error_of(a), "");
  std::memset(static_cast<char*>(t.raw()) + 40, 0, 1);  // byte 0 past the 40 bytes
  EXPECT_EQ(internal_error_of(a),
            "checked device: byte 0 past the end of a block of 40 bytes of gradients was "
            "overwritten (a write out of bounds)");
}

TEST(Device, AWriteBeforeTheStartIsNamedAfterTheFree) {
  Allocator a(Device::kChecked);
  {
    Tensor t = Tensor::zeros({4}, DType::kF32, Category::kParameters, a);
    static_cast<char*>(t.raw())[-3] = 0;
  }  // freed: the damage is recorded then, and check_device still names it
  EXPECT_EQ(internal_error_of(a),
            "checked device: byte 3 before a block of 16 bytes of parameters was overwritten "
            "(a write out of bounds)");
}

TEST(Device, TheHostDeviceCachesAndChecksNothing) {
  Allocator a;
  { Tensor t = Tensor::empty({100}, DType::kF32, Category::kOther, a); }
  { Tensor t = Tensor::empty({100}, DType::kF32, Category::kOther, a); }
  EXPECT_EQ(a.stats().cache_hits, 1);
  EXPECT_EQ(internal_error_of(a), "");
}

TEST(Device, CopiesBetweenDevicesGoThroughOneFunction) {
  Allocator host, checked(Device::kChecked);
  Tensor a = Tensor::empty({3}, DType::kF32, Category::kOther, host);
  for (int i = 0; i < 3; ++i) a.data<float>()[i] = static_cast<float>(i) + 0.25f;
  Tensor b = Tensor::empty({3}, DType::kF32, Category::kOther, checked);
  b.copy_from(a);  // same dtype: copy_bytes from the host to the checked device
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.data<float>()[i], a.data<float>()[i]);
  float back[3] = {};
  copy_bytes(back, Device::kHost, b.raw(), b.device(), b.nbytes());
  EXPECT_EQ(std::memcmp(back, a.raw(), sizeof back), 0);
  EXPECT_TRUE(host_addressable(Device::kHost) && host_addressable(Device::kChecked));
  try {  // a device whose memory the CPU cannot reach: named, not copied
    copy_bytes(back, static_cast<Device>(9), a.raw(), Device::kHost, 4);
    ADD_FAILURE() << "a copy to an unknown device passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    EXPECT_EQ(e.message(),
              "copy of 4 bytes from device host to device ?: no copy between these "
              "devices");
  }
  checked.check_device();
}

}  // namespace
}  // namespace kiri
