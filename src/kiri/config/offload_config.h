#pragma once
// The offload.* keys checked together, and mapped onto the I/O engine's options
// (docs/offload.md). The schema checks each key alone (ranges, the block size's form);
// these are the rules between the I/O keys.
#include <cstdint>

#include "kiri/config/run_config.h"

namespace kiri {

// One kConfig error listing every problem of the offload I/O keys, each naming its keys
// and values: offload.block_size not a multiple of 4 KiB (up to 1 GiB); offload.buffer_mb
// below one block of each of the 3 states; an empty offload.path, buffer_count below 2 or
// queue_depth below 1. Only with offload on (the keys are unused otherwise). The tiers'
// rules (no cpu, ZeRO stage 3 for parameters, 2 for gradients, the optimizer offloaded
// first) are the layout's (validate_layout, check_layout).
void validate_offload(const RunConfig& cfg);

// Whether the gradient shards live on NVMe: offload.gradients = nvme, or auto with
// offload.parameters = nvme (ZeRO-Infinity moves every model state off RAM).
bool offload_gradients(const OffloadConfig& o);

// offload.block_size in bytes (kConfig naming the key when it does not parse).
int64_t offload_block_bytes(const OffloadConfig& o);
// offload.buffer_mb in bytes, rounded down to whole bytes.
int64_t offload_buffer_bytes(const OffloadConfig& o);

// The tiers as the layout's rules and the planner read them, with the swap I/O shape:
// offload.gradients = auto resolved (offload_gradients; cpu stays cpu, which the rules
// refuse), the staging pool and the block in bytes. With offload off a bad block size is
// unused, not named (the default block then).
Offload offload_spec(const OffloadConfig& o);

}  // namespace kiri
