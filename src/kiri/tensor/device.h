#pragma once
// Where a tensor's storage lives, and the memory of each device (ggml-backend's buffer
// type): the allocator asks a device's memory for raw blocks and caches them on top, so a
// new device is a new DeviceMemory, not a new allocator.
//
//   kHost     host RAM, where the CPU kernels compute (the planner's "device" and "host"
//             tiers are the same memory on this backend).
//   kChecked  host RAM handed out for tests: every block is poisoned (0xFF bytes: NaN in
//             f32, bf16 and f16, -1 in int32) so that a read of memory nobody wrote shows
//             up in the loss, fenced by guard bytes before and after the bytes asked for,
//             checked when the block is freed and by check(), and never cached, so that
//             every allocation is fresh and every free is checked. The CPU kernels compute
//             on it unchanged: the whole training step runs there in the tests.
#include <cstddef>
#include <memory>
#include <string>

namespace kiri {

enum class Device { kHost, kChecked };
// "host", "checked"
const char* device_name(Device device);

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // A block of `block` bytes (>= `used`, the bytes the caller asked for) aligned to
  // `alignment`; nullptr when the system refuses it. `what` names the block in messages.
  virtual void* allocate(size_t block, size_t used, size_t alignment, const char* what) = 0;
  virtual void free(void* p, size_t block) noexcept = 0;
  // Whether a freed block may be cached and handed out again.
  virtual bool caches() const { return true; }
  // Raises kInternal naming the first damage this memory found (none on the host).
  virtual void check() const {}
};

std::unique_ptr<DeviceMemory> device_memory(Device device);

// Whether the CPU can read and write the device's memory directly (kHost and kChecked: both
// host RAM). Code that touches a tensor's bytes itself asks this first.
bool host_addressable(Device device);

// The one copy between devices: `bytes` bytes from `src` (memory of src_device) to `dst`
// (memory of dst_device); the two may overlap. Every host<->device copy of tensor bytes
// goes through here, so a device with its own memory adds its copy in this one place. Today
// both devices are host RAM (a memmove); any other pair is a kInternal error naming them.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace kiri
