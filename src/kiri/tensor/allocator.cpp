#include "kiri/tensor/allocator.h"

#include <cstdlib>
#include <new>

#include "kiri/base/error.h"
#include "kiri/base/log.h"
#include "kiri/base/units.h"

namespace kiri {

const char* category_name(Category category) {
  switch (category) {
    case Category::kParameters:
      return "parameters";
    case Category::kGradients:
      return "gradients";
    case Category::kOptimizerStates:
      return "optimizer_states";
    case Category::kActivations:
      return "activations";
    case Category::kBuffers:
      return "buffers";
    case Category::kOther:
      return "other";
  }
  return "?";
}

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kNvme:
      return "nvme";
  }
  return "?";
}

int64_t MemoryStats::nvme_total() const {
  int64_t n = 0;
  for (int64_t b : nvme) n += b;
  return n;
}

std::string MemoryStats::breakdown() const {
  std::string s;
  const bool tiers = nvme_total() > 0;
  for (int i = 0; i < kNumCategories; ++i)
    s += str("  ", category_name(static_cast<Category>(i)), ": ", format_bytes(current[i]),
             " (peak ", format_bytes(peak[i]), ")",
             tiers ? ", nvme " + format_bytes(nvme[i]) : std::string(), "\n");
  s += str("  allocated: ", format_bytes(allocated), ", reserved: ", format_bytes(reserved),
           (limit > 0 ? ", limit: " + format_bytes(limit) : std::string()),
           tiers ? ", on nvme: " + format_bytes(nvme_total()) : std::string());
  return s;
}

void AllocatorCore::add_tier_bytes(Tier tier, Category category, int64_t delta) {
  KIRI_CHECK(tier == Tier::kNvme, "only the nvme tier is counted apart from memory, got ",
             tier_name(tier));
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.nvme[static_cast<int>(category)] += delta;
}

AllocatorCore::AllocatorCore(Device device) : memory_(device_memory(device)) {}

void AllocatorCore::check_device() const {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_->check();
}

AllocatorCore::~AllocatorCore() {
  release_cache_locked();
}

size_t AllocatorCore::round_size(size_t bytes) {
  // Small blocks to 512 B, large ones to 64 KiB, so a cached block fits
  // requests of nearly the same size without much waste.
  const size_t unit = bytes < (size_t{1} << 20) ? 512 : (size_t{1} << 16);
  return bytes == 0 ? unit : (bytes + unit - 1) / unit * unit;
}

std::pair<void*, size_t> AllocatorCore::take_cached(size_t rounded) {
  // Best fit, but never a block more than twice the size asked for.
  // A request of whole pages takes only a page-aligned block (O_DIRECT buffers).
  const bool pages = rounded % 4096 == 0;
  auto it = cache_.lower_bound(rounded);
  while (pages && it != cache_.end() && it->first <= 2 * rounded &&
         reinterpret_cast<uintptr_t>(it->second) % 4096 != 0)
    ++it;
  if (it == cache_.end() || it->first > 2 * rounded) return {nullptr, 0};
  std::pair<void*, size_t> hit{it->second, it->first};
  cache_.erase(it);
  return hit;
}

void* AllocatorCore::allocate(size_t bytes, Category category) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int c = static_cast<int>(category);
  const int64_t need = static_cast<int64_t>(bytes);
  if (stats_.limit > 0 && stats_.allocated + need > stats_.limit) {
    int largest = 0;
    for (int i = 1; i < kNumCategories; ++i)
      if (stats_.current[i] > stats_.current[largest]) largest = i;
    std::string msg = str("allocating ", format_bytes(need), " of ", category_name(category),
                          " would exceed the limit of ", format_bytes(stats_.limit), " (",
                          format_bytes(stats_.allocated), " in use; the largest category is ",
                          category_name(static_cast<Category>(largest)), " with ",
                          format_bytes(stats_.current[largest]), ")\n", stats_.breakdown());
    if (advice_) msg += "\n" + advice_(stats_, category, need);
    KIRI_RAISE(kOutOfMemory, msg);
  }
  const size_t rounded = round_size(bytes);
  auto [p, block] = memory_->caches() ? take_cached(rounded) : std::pair<void*, size_t>{};
  if (p) {
    ++stats_.cache_hits;
  } else {
    if (stats_.limit > 0 && stats_.reserved + static_cast<int64_t>(rounded) > stats_.limit)
      release_cache_locked();
    else if (stats_.reserved + static_cast<int64_t>(rounded) > high_water_)
      release_smaller_than(rounded);
    block = rounded;
    // Blocks of whole pages are page-aligned, as O_DIRECT needs (offload's buffers).
    p = memory_->allocate(block, bytes, block % 4096 == 0 ? 4096 : 64, category_name(category));
    if (!p)
      KIRI_RAISE(kOutOfMemory, "the operating system refused ", format_bytes(block), " for ",
                 category_name(category), "\n", stats_.breakdown());
    stats_.reserved += static_cast<int64_t>(block);
    stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    high_water_ = std::max(high_water_, stats_.reserved);
  }
  in_use_[p] = block;
  stats_.current[c] += need;
  stats_.peak[c] = std::max(stats_.peak[c], stats_.current[c]);
  stats_.allocated += need;
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  ++stats_.allocations;
  return p;
}

void AllocatorCore::deallocate(void* ptr, size_t bytes, Category category) noexcept {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    // Called from destructors: report and leak rather than throw.
    log::error("allocator: deallocate of a pointer it does not own (", bytes, " bytes of ",
               category_name(category), "): a tensor outlived its allocator");
    return;
  }
  if (memory_->caches()) {
    cache_.emplace(it->second, ptr);
  } else {
    memory_->free(ptr, it->second);
    stats_.reserved -= static_cast<int64_t>(it->second);
  }
  in_use_.erase(it);
  stats_.current[static_cast<int>(category)] -= static_cast<int64_t>(bytes);
  stats_.allocated -= static_cast<int64_t>(bytes);
}

void AllocatorCore::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.limit = bytes;
}

void AllocatorCore::release_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

void AllocatorCore::release_cache_locked() {
  for (auto& [size, p] : cache_) {
    memory_->free(p, size);
    stats_.reserved -= static_cast<int64_t>(size);
  }
  cache_.clear();
}

void AllocatorCore::release_smaller_than(size_t rounded) {
  // Called on a miss that would raise the high-water mark. Cached blocks smaller than the
  // request can never serve it, but when they add up to it their memory can: handed back to
  // the C library (which merges free neighbours, or unmaps large blocks), they make room for
  // the new block instead of the process growing by the request while as much again sits
  // idle here. Only past the high-water mark, so that a steady state does not trade cached
  // blocks for pages faulted in anew (~20 us per 4 KiB) every step. GPT-2 1.5B with
  // parameter offload: the embedding's 313 MiB gradient met 1 GiB of cached activation
  // blocks (peak held 4.73 GiB against 4.17 GiB live; docs/performance.md, which also has
  // what it costs optimizer offload and the variant that only unmapped large blocks).
  const auto end = cache_.lower_bound(rounded);
  size_t smaller = 0;
  for (auto it = cache_.begin(); it != end && smaller < rounded; ++it) smaller += it->first;
  if (smaller < rounded) return;
  for (auto it = cache_.begin(); it != end; ++it) {
    memory_->free(it->second, it->first);
    stats_.reserved -= static_cast<int64_t>(it->first);
  }
  cache_.erase(cache_.begin(), end);
  ++stats_.cache_returns;
}

void AllocatorCore::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.current;
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

MemoryStats AllocatorCore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace kiri
