#pragma once
// The bandwidth of the disk under a folder, as the offload engine uses it: O_DIRECT
// transfers of block_size pieces, queue_depth in flight, through the configured
// engine (kiri plan --calibrate; benchmarks/offload_io.sh compares engines and settings).
#include <cstdint>
#include <string>

#include "kiri/offload/async_io.h"

namespace kiri::offload {

struct DiskBandwidth {
  double write_bytes_per_s = 0;
  double read_bytes_per_s = 0;
  bool direct = true;  // O_DIRECT was in use (false: the filesystem refuses it)
  std::string engine;  // the engine measured ("io_uring", "threads")
};

// Writes `bytes` in a scratch file under `dir` (reserved first, removed after), then
// times a rewrite of it (fdatasync'd: steady state, as every step rewrites the swap
// files) and a read back (its page cache dropped first); kIo naming the folder when it
// cannot (a full disk says so). The buffered fallback sets direct = false.
DiskBandwidth measure_disk_bandwidth(const std::string& dir, int64_t bytes,
                                     const IoOptions& options);

}  // namespace kiri::offload
