#pragma once
// Limits of the sharding engine (parallel/shard/sharded.h) that its memory depends on, here
// so that the planner (plan/memory.cpp, which stands on base alone) counts the same numbers
// the engine uses instead of copies.

namespace kiri {

// Reductions (a unit's reduce-scatter, then with hybrid sharding its replicas'
// all-reduce) outstanding at once, as FSDP's limit_all_gathers caps all-gathers.
// 2: the reduction of the unit just finished overlaps the next unit's backward.
// One still outstanding after that is waiting for a lagging peer (the backends
// progress only when ranks poll), not for bandwidth: a third would only keep one
// more unit's full gradient alive.
inline constexpr int kMaxInflightReductions = 2;

// Gradient offload: writes of reduced gradient shards in flight at once. Each holds its
// unit's [shard] buffer; a backward that outruns the disk waits for the oldest rather than
// keep every unit's gradient in RAM. 1: a unit's write runs under the next unit's backward,
// and a unit's backward is slower than writing its gradient shard (on this machine's disk,
// 2 GB/s, 80 MB of a GPT-2 1.5B block in bf16 take 40 ms, its backward seconds).
inline constexpr int kMaxInflightGradWrites = 1;

}  // namespace kiri
