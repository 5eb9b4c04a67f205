#pragma once
// The offload.* keys mapped onto the I/O engine's options (docs/offload.md); the keys and
// their rules are the config's (config/offload_config.h).
#include "kiri/config/offload_config.h"
#include "kiri/offload/async_io.h"

namespace kiri::train {

// The engine's options: offload.engine, offload.queue_depth, offload.block_size.
offload::IoOptions io_options(const OffloadConfig& o);

}  // namespace kiri::train
