#pragma once
// The offload.* keys checked together, and mapped onto the I/O engine's options
// (docs/offload.md). The schema checks each key alone (ranges, the block size's form);
// these are the rules between keys and against the layout.
#include <cstdint>

#include "kiri/offload/async_io.h"
#include "kiri/train/run_config.h"

namespace kiri::train {

// One kConfig error listing every problem of cfg.offload, each naming its keys and
// values: `cpu` for either state (on the CPU backend host memory is already where the
// state is: use nvme); offload.parameters = nvme without ZeRO stage 3 (parallel.zero_stage
// or parallel.sharding_strategy, as resolve_sharding reads them) or without
// offload.optimizer = nvme; offload.gradients = nvme below ZeRO stage 2 or without
// offload.optimizer = nvme; offload.block_size not a multiple of 4 KiB (up to 1 GiB);
// offload.buffer_mb below one block of each of the 3 states; an empty offload.path,
// buffer_count below 2 or queue_depth below 1 with offload on. Offload off: only the
// `cpu` rule applies (the other keys are unused).
void validate_offload(const RunConfig& cfg);

// Whether the gradient shards live on NVMe: offload.gradients = nvme, or auto with
// offload.parameters = nvme (ZeRO-Infinity moves every model state off RAM).
bool offload_gradients(const OffloadConfig& o);

// offload.block_size in bytes (kConfig naming the key when it does not parse).
int64_t offload_block_bytes(const OffloadConfig& o);
// offload.buffer_mb in bytes, rounded down to whole bytes.
int64_t offload_buffer_bytes(const OffloadConfig& o);

// The engine's options: offload.engine, offload.queue_depth, offload.block_size.
offload::IoOptions io_options(const OffloadConfig& o);

}  // namespace kiri::train
