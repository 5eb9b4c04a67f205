#include "kiri/kernels/cpu/bandwidth.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"

namespace kiri::kernels::cpu {

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Floats = std::unique_ptr<float[], FreeDeleter>;

// Uninitialized, so that the threads' first touch places the pages (one NUMA node
// per thread's share where there are several).
Floats allocate(int64_t n) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  KIRI_CHECK(p != nullptr, "measure_memory_bandwidth: cannot allocate ", bytes, " bytes");
  return Floats(p);
}

long sysconf_or(int name, long fallback) {
  const long v = sysconf(name);
  return v > 0 ? v : fallback;
}

}  // namespace

int64_t default_bandwidth_array_bytes() {
  int64_t llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf_or(_SC_LEVEL3_CACHE_SIZE, 0);
#endif
#if defined(_SC_LEVEL2_CACHE_SIZE)
  if (llc == 0) llc = sysconf_or(_SC_LEVEL2_CACHE_SIZE, 0);
#endif
  const int64_t memory = int64_t{sysconf_or(_SC_PHYS_PAGES, 0)} * sysconf_or(_SC_PAGESIZE, 4096);
  int64_t bytes = std::max<int64_t>(2 * llc, int64_t{256} << 20);
  if (memory > 0) bytes = std::min(bytes, memory / 8);
  return bytes;
}

double measure_memory_bandwidth(int threads, int64_t array_bytes, int repeats) {
  KIRI_CHECK_KIND(kConfig, threads >= 1, "measure_memory_bandwidth: threads must be >= 1, got ",
                  threads);
  KIRI_CHECK_KIND(kConfig, repeats >= 1, "measure_memory_bandwidth: repeats must be >= 1, got ",
                  repeats);
  if (array_bytes == 0) array_bytes = default_bandwidth_array_bytes();
  KIRI_CHECK_KIND(kConfig, array_bytes >= 4096, "measure_memory_bandwidth: arrays of ", array_bytes,
                  " bytes are too small to measure memory (>= 4096)");
  const int64_t n = array_bytes / static_cast<int64_t>(sizeof(float));
  Floats a = allocate(n), b = allocate(n);  // [n] each
  float* pa = a.get();
  float* pb = b.get();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    pa[i] = 1.0f;
    pb[i] = 0.5f;
  }
  // Two forms of the same triad, each pass timed: over the two arrays (two streams read,
  // one written) and over their halves at once (a += s*b and c += s*d: four read, two
  // written). A core's rate grows with the streams its prefetchers follow, and AdamW's
  // update has seven; the faster form is the machine's rate. The scale alternates in
  // sign: a stays near 1 however many passes run.
  const int64_t h = n / 2;
  float* pc = pa + h;
  float* pd = pb + h;
  double best = 1e30;
  for (int rep = 0; rep <= repeats; ++rep) {
    const float s = rep % 2 == 0 ? 1e-3f : -1e-3f;
    Timer t;
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pa[i] = pa[i] + s * pb[i];
    const double two = t.seconds();
    t.reset();
#pragma omp parallel for simd schedule(static) num_threads(threads)
    for (int64_t i = 0; i < h; ++i) {
      pa[i] = pa[i] - s * pb[i];
      pc[i] = pc[i] - s * pd[i];
    }
    const double four = t.seconds() * static_cast<double>(n) / static_cast<double>(2 * h);
    if (rep > 0) best = std::min({best, two, four});
  }
  KIRI_CHECK(pa[n / 2] > 0.5f && pa[n / 2] < 1.5f,
             "measure_memory_bandwidth: the triad drifted to ", pa[n / 2]);
  return 12.0 * static_cast<double>(n) / best;
}

}  // namespace kiri::kernels::cpu
