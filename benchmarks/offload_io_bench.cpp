// Disk bandwidth of one offload I/O setting: measure_disk_bandwidth (the code behind
// `kiri plan --calibrate`) on a scratch file of BYTES under DIR, with ENGINE
// (io_uring, threads), QUEUE_DEPTH pieces in flight of BLOCK bytes each; prints one
// JSON line with the best of REPEAT write and read passes (GB/s, 1e9 bytes a second)
// and the CPU time the process spent per GB moved (user + system, all threads: the
// thread pool's workers and io_uring's kernel workers alike), which training pays
// on the same cores.
// benchmarks/offload_io.sh runs the engines and settings side by side.
//   offload_io_bench DIR BYTES ENGINE QUEUE_DEPTH BLOCK [REPEAT]
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/units.h"
#include "kiri/offload/disk_bench.h"

namespace {
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: offload_io_bench DIR BYTES ENGINE QUEUE_DEPTH BLOCK [REPEAT] [BUSY]\n");
    return 2;
  }
  try {
    using kiri::IoEngine;
    const std::string engine = argv[3];
    kiri::offload::IoOptions o;
    if (engine == "io_uring")
      o.engine = kiri::IoEngine::kIoUring;
    else if (engine == "threads")
      o.engine = kiri::IoEngine::kThreads;
    else
      KIRI_RAISE(kInvalidArgument, "ENGINE must be io_uring or threads, got ", engine);
    const int64_t bytes = kiri::parse_bytes(argv[2]);
    o.queue_depth = std::atoi(argv[4]);
    o.block_size = kiri::parse_bytes(argv[5]);
    const int repeat = argc > 6 ? std::atoi(argv[6]) : 1;
    const int busy = argc > 7 ? std::atoi(argv[7]) : 0;
    KIRI_CHECK(repeat >= 1 && busy >= 0, "REPEAT must be >= 1 and BUSY >= 0");
    // The spinners' own CPU time is taken out of the process's below.
    std::atomic<bool> stop{false};
    std::atomic<int64_t> spin_ns{0};
    std::vector<std::thread> spinners;
    for (int i = 0; i < busy; ++i)
      spinners.emplace_back([&stop, &spin_ns] {
        volatile double x = 1.0;
        while (!stop.load(std::memory_order_relaxed))
          for (int k = 0; k < 4096; ++k) x = x * 1.0000001 + 1e-9;
        timespec t{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        spin_ns += int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
      });
    struct Join {
      std::atomic<bool>& stop;
      std::vector<std::thread>& threads;
      void operator()() {
        stop = true;
        for (auto& t : threads)
          if (t.joinable()) t.join();
      }
      ~Join() { (*this)(); }
    } join{stop, spinners};
    double write = 0, read = 0;
    bool direct = true;
    const double cpu0 = cpu_seconds();
    for (int r = 0; r < repeat; ++r) {
      const auto bw = kiri::offload::measure_disk_bandwidth(argv[1], bytes, o);
      write = std::max(write, bw.write_bytes_per_s);
      read = std::max(read, bw.read_bytes_per_s);
      direct = direct && bw.direct;
    }
    join();
    // Three passes each: the untimed fill, the rewrite and the read.
    const double cpu_per_gb = (cpu_seconds() - cpu0 - static_cast<double>(spin_ns) / 1e9) /
                              (3.0 * repeat * static_cast<double>(bytes) / 1e9);
    std::printf(
        "{\"engine\": \"%s\", \"queue_depth\": %d, \"block_size\": %lld, \"bytes\": %lld, "
        "\"busy\": %d, \"direct\": %s, \"write_gbps\": %.4f, \"read_gbps\": %.4f, "
        "\"cpu_s_per_gb\": %.4f}\n",
        engine.c_str(), o.queue_depth, static_cast<long long>(o.block_size),
        static_cast<long long>(bytes), busy, direct ? "true" : "false", write / 1e9, read / 1e9,
        cpu_per_gb);
    return 0;
  } catch (const kiri::Error& e) {
    std::fprintf(stderr, "offload_io_bench: %s\n", e.what());
    return 1;
  }
}
