#pragma once
// Asynchronous direct I/O for the swap files of the offload engine. A request
// (bytes at an offset of a file, into or out of a 4 KiB-aligned buffer) is cut
// into block_size pieces, at most queue_depth of them in flight, as DeepSpeed's
// aio handle does; wait() returns once every piece is done. Two engines, chosen
// by measurement (benchmarks/offload_io.sh, docs/performance.md): io_uring (liburing)
// and a pread/pwrite thread pool.
#include <cstdint>
#include <memory>
#include <string>

#include "kiri/config/io_engine.h"

namespace kiri::offload {

// The engine: the config's offload.engine (config/io_engine.h; name() spells it).

struct IoOptions {
  IoEngine engine = IoEngine::kAuto;
  int queue_depth = 8;                    // pieces in flight
  int64_t block_size = int64_t{1} << 20;  // bytes per piece (a multiple of 4 KiB)
};

// What a request ended with: err = 0 and done = bytes, else the first error
// (an errno) or, for a short read or write, err = 0 and done < bytes.
struct IoResult {
  int err = 0;
  int64_t done = 0;
  int64_t bytes = 0;
  bool ok() const { return err == 0 && done == bytes; }
};

class AsyncIo {
 public:
  using Ticket = uint64_t;
  virtual ~AsyncIo() = default;
  // Starts the request and returns at once (or when the queue is full, once a
  // piece completes). buf, offset and bytes: multiples of 4 KiB for O_DIRECT.
  virtual Ticket read(int fd, void* buf, int64_t bytes, int64_t offset) = 0;
  virtual Ticket write(int fd, const void* buf, int64_t bytes, int64_t offset) = 0;
  // Blocks until the request is done; each ticket is waited for once.
  virtual IoResult wait(Ticket ticket) = 0;
  // Whether wait(ticket) would return at once (the request is done); it does not wait.
  virtual bool ready(Ticket ticket) = 0;
  virtual const char* name() const = 0;  // "io_uring" or "threads"
};

std::unique_ptr<AsyncIo> make_async_io(const IoOptions& options);

}  // namespace kiri::offload
