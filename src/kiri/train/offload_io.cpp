#include "kiri/train/offload_io.h"

namespace kiri::train {

offload::IoOptions io_options(const OffloadConfig& o) {
  offload::IoOptions io;
  io.engine = o.engine;
  io.queue_depth = o.queue_depth;
  io.block_size = offload_block_bytes(o);
  return io;
}

}  // namespace kiri::train
