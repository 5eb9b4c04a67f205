#pragma once
// The category-tagging caching allocator. Every byte kiri allocates for a
// tensor says what it is for, so a rank can say where its memory goes:
// parameters, gradients, optimizer states, activations, buffers
// (communication and scratch) or other.
//
// Freed blocks are cached and reused: on these machines the first touch of a
// fresh page costs ~20 us per 4 KiB, and glibc hands blocks over 32 MiB back
// to the OS on free, so a big buffer allocated anew every step would be
// faulted in anew every step. A miss that would raise the high-water mark while
// smaller cached blocks add up to the request hands those back to the C library
// first, so that idle blocks of the wrong sizes do not make the process grow.
// "allocated" counts live tensors; "reserved" also counts the cached blocks held
// for reuse.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "kiri/tensor/device.h"

namespace kiri {

enum class Category { kParameters, kGradients, kOptimizerStates, kActivations, kBuffers, kOther };
constexpr int kNumCategories = 6;
// Where bytes live. Allocated tensors are in the memory the kernels compute on: on
// the CPU backend that is host RAM (kDevice and kHost are the same memory), on a GPU
// backend device memory, with pinned host memory a tier of its own. kNvme: swap
// files of the offload engine (offload/swap_space.h), counted as they are created.
enum class Tier { kDevice, kHost, kNvme };
// "device", "host", "nvme"
const char* tier_name(Tier tier);
// "parameters", "gradients", "optimizer_states", "activations", "buffers", "other"
const char* category_name(Category category);

struct MemoryStats {
  std::array<int64_t, kNumCategories> current{};  // live bytes per category
  std::array<int64_t, kNumCategories> peak{};     // peak live bytes per category
  int64_t allocated = 0;                          // live bytes, all categories
  int64_t peak_allocated = 0;
  int64_t reserved = 0;  // allocated plus cached blocks
  int64_t peak_reserved = 0;
  int64_t limit = 0;  // 0: none
  // Bytes of each category on the NVMe tier (swap files); not in `current`, which
  // is what the allocator holds in memory.
  std::array<int64_t, kNumCategories> nvme{};
  int64_t allocations = 0;
  int64_t cache_hits = 0;
  // Misses that handed smaller cached blocks back (at a new high-water mark).
  int64_t cache_returns = 0;

  int64_t of(Category c) const { return current[static_cast<int>(c)]; }
  int64_t peak_of(Category c) const { return peak[static_cast<int>(c)]; }
  int64_t nvme_of(Category c) const { return nvme[static_cast<int>(c)]; }
  int64_t nvme_total() const;
  // One line per category, for error messages and reports.
  std::string breakdown() const;
};

// The pool behind an Allocator. Storage keeps a shared reference to it, so a
// tensor that outlives its Allocator object still returns its block safely.
class AllocatorCore {
 public:
  // Called on out-of-memory to add advice to the message (the planner quotes
  // the cut that would fit). Gets the stats, the category and size requested.
  using OomAdvice = std::function<std::string(const MemoryStats&, Category, int64_t)>;

  explicit AllocatorCore(Device device = Device::kHost);
  ~AllocatorCore();
  AllocatorCore(const AllocatorCore&) = delete;
  AllocatorCore& operator=(const AllocatorCore&) = delete;

  // 64-byte aligned (4 KiB when the rounded size is whole pages); raises kOutOfMemory (with the
  // breakdown) past the limit.
  void* allocate(size_t bytes, Category category);
  // Never throws (storage destructors call it); a foreign pointer is logged.
  void deallocate(void* ptr, size_t bytes, Category category) noexcept;

  // The limit applies to allocated bytes (live tensors); cached blocks are
  // dropped first when reserved memory would pass it. 0 removes the limit.
  void set_limit(int64_t bytes);
  void set_oom_advice(OomAdvice advice) { advice_ = std::move(advice); }
  // Accounts `delta` bytes of `category` on another tier than memory (kNvme: a swap
  // file created, > 0, or removed, < 0); memory itself is counted by allocate.
  void add_tier_bytes(Tier tier, Category category, int64_t delta);
  // Hands every cached block back to the OS.
  void release_cache();
  void reset_peaks();
  MemoryStats stats() const;
  Device device() const { return memory_->device(); }
  // Raises kInternal naming the first damage the device's memory found (the checked
  // device's guards); nothing on the host.
  void check_device() const;

 private:
  static size_t round_size(size_t bytes);
  std::pair<void*, size_t> take_cached(size_t rounded);  // {block, its size} or {nullptr, 0}
  void release_cache_locked();
  // On a miss past the high-water mark: frees the cached blocks smaller than `rounded`
  // when together they hold it.
  void release_smaller_than(size_t rounded);

  mutable std::mutex mutex_;
  MemoryStats stats_;
  std::multimap<size_t, void*> cache_;        // block size -> free block
  int64_t high_water_ = 0;                    // the most ever reserved (reset_peaks keeps it)
  std::unordered_map<void*, size_t> in_use_;  // live block -> its size
  OomAdvice advice_;
  std::unique_ptr<DeviceMemory> memory_;
};

class Allocator {
 public:
  using OomAdvice = AllocatorCore::OomAdvice;
  explicit Allocator(Device device = Device::kHost)
      : core_(std::make_shared<AllocatorCore>(device)) {}
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  void* allocate(size_t bytes, Category category) { return core_->allocate(bytes, category); }
  void deallocate(void* ptr, size_t bytes, Category category) noexcept {
    core_->deallocate(ptr, bytes, category);
  }
  void set_limit(int64_t bytes) { core_->set_limit(bytes); }
  void set_oom_advice(OomAdvice advice) { core_->set_oom_advice(std::move(advice)); }
  void add_tier_bytes(Tier tier, Category category, int64_t delta) {
    core_->add_tier_bytes(tier, category, delta);
  }
  void release_cache() { core_->release_cache(); }
  void reset_peaks() { core_->reset_peaks(); }
  MemoryStats stats() const { return core_->stats(); }
  Device device() const { return core_->device(); }
  void check_device() const { core_->check_device(); }
  const std::shared_ptr<AllocatorCore>& core() const { return core_; }

 private:
  std::shared_ptr<AllocatorCore> core_;
};

}  // namespace kiri
