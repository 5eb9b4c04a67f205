#pragma once
// The planner's view of a kiri train run: --auto's layout choice, --dry-run, and the
// advice an out-of-memory error quotes (commands.cpp's train verb uses them).
#include <optional>
#include <string>

#include "kiri/tensor/allocator.h"
#include "kiri/train/run_config.h"

namespace kiri::cli {

// The allocator's out-of-memory advice: the category that overflowed and the cheapest
// layout change on the same world that the planner says fits the limit.
std::string oom_advice(const train::RunConfig& cfg, int world, const MemoryStats& stats,
                       Category category, int64_t bytes);
// train --auto: sets cfg's layout keys to the planner's fastest layout of this world that
// fits the limit, and logs the choice (rank 0).
void choose_layout(train::RunConfig& cfg, int world, int rank,
                   const std::optional<std::string>& mem_limit);
// kiri train --dry-run: the checks before the first step, then the resolved config and
// the layout (rank 0), without building the model; returns the exit code.
int dry_run(train::RunConfig cfg, bool auto_layout, const std::optional<std::string>& mem_limit);

}  // namespace kiri::cli
