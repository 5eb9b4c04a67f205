#include "kiri/tensor/device.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "kiri/base/error.h"
#include "kiri/base/log.h"

namespace kiri {

const char* device_name(Device device) {
  switch (device) {
    case Device::kHost:
      return "host";
    case Device::kChecked:
      return "checked";
  }
  return "?";
}

bool host_addressable(Device device) {
  return device == Device::kHost || device == Device::kChecked;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  KIRI_CHECK_KIND(kInternal, host_addressable(dst_device) && host_addressable(src_device),
                  "copy of ", bytes, " bytes from device ", device_name(src_device), " to device ",
                  device_name(dst_device), ": no copy between these devices");
  if (bytes > 0) std::memmove(dst, src, bytes);
}

namespace {

class HostMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::kHost; }
  void* allocate(size_t block, size_t, size_t alignment, const char*) override {
    return std::aligned_alloc(alignment, block);
  }
  void free(void* p, size_t) noexcept override { std::free(p); }
};

// [guard: kGuard bytes][the `used` bytes, poisoned][guard: past the block, to a page boundary]
class CheckedMemory final : public DeviceMemory {
 public:
  static constexpr size_t kGuard = 4096;  // keeps the caller's block aligned to a page
  static constexpr unsigned char kGuardByte = 0xA5, kPoison = 0xFF;

  Device device() const override { return Device::kChecked; }
  bool caches() const override { return false; }

  void* allocate(size_t block, size_t used, size_t alignment, const char* what) override {
    KIRI_CHECK(alignment <= kGuard && used <= block, "checked device: alignment ", alignment,
               " or ", used, " bytes of a block of ", block);
    // aligned_alloc takes a multiple of the alignment: the tail guard runs to the next page.
    const size_t total = kGuard + (block + kGuard - 1) / kGuard * kGuard + kGuard;
    auto* base = static_cast<unsigned char*>(std::aligned_alloc(kGuard, total));
    if (!base) return nullptr;
    const size_t tail = total - kGuard - used;
    std::memset(base, kGuardByte, kGuard);
    std::memset(base + kGuard, kPoison, used);
    std::memset(base + kGuard + used, kGuardByte, tail);
    std::lock_guard<std::mutex> lock(mutex_);
    live_[base + kGuard] = {used, tail, what};
    return base + kGuard;
  }

  void free(void* p, size_t) noexcept override {
    auto* user = static_cast<unsigned char*>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(user);
    if (it == live_.end()) return;  // the allocator reports foreign pointers
    note_damage(user, it->second);
    live_.erase(it);
    std::free(user - kGuard);
  }

  void check() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [user, b] : live_) note_damage(user, b);
    KIRI_CHECK_KIND(kInternal, damage_.empty(), damage_, damaged_ > 1 ? " (and " : "",
                    damaged_ > 1 ? std::to_string(damaged_ - 1) + " more blocks)" : "");
  }

 private:
  struct Block {
    size_t used, tail;  // the bytes asked for, and the guard after them
    const char* what;
  };

  static size_t first_changed(const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] != kGuardByte) return i;
    return n;
  }

  // Records (and logs, once per block) a guard that was written: a write before the block
  // or past the bytes asked for.
  void note_damage(unsigned char* user, Block& b) const {
    const size_t tail = b.tail;
    const size_t before = first_changed(user - kGuard, kGuard);
    const size_t after = first_changed(user + b.used, tail);
    if ((before == kGuard && after == tail) || b.what == nullptr) return;
    const std::string msg =
        after < tail ? str("checked device: byte ", after, " past the end of a block of ", b.used,
                           " bytes of ", b.what, " was overwritten (a write out of bounds)")
                     : str("checked device: byte ", kGuard - before, " before a block of ", b.used,
                           " bytes of ", b.what, " was overwritten (a write out of bounds)");
    log::error(msg);
    if (damage_.empty()) damage_ = msg;
    ++damaged_;
    b.what = nullptr;  // counted once
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<unsigned char*, Block> live_;
  mutable std::string damage_;
  mutable int damaged_ = 0;
};

}  // namespace

std::unique_ptr<DeviceMemory> device_memory(Device device) {
  if (device == Device::kChecked) return std::make_unique<CheckedMemory>();
  return std::make_unique<HostMemory>();
}

}  // namespace kiri
