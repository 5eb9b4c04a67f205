// Where the trainer's state lives: offload.* opens this rank's swap space before the
// model's cuts (parameter offload needs it in the sharding engine) and hands the
// optimizer its states' tier (docs/offload.md).
#include <cstdio>

#include "kiri/train/offload_io.h"
#include "kiri/train/trainer.h"

namespace kiri::train {

void Trainer::open_swap_space() {
  validate_offload(cfg_);  // also for configs built in code, which skip kiri::validate
  const OffloadConfig& o = cfg_.offload;
  if (o.optimizer != OffloadTier::kNvme) return;
  char rank[32];
  std::snprintf(rank, sizeof rank, "/rank%05d", world_->rank());
  offload::SwapOptions swap;
  swap.dir = o.path + rank;
  swap.io = io_options(o);
  swap_ = std::make_unique<offload::SwapSpace>(swap, allocator_);
}

optim::StateOffload Trainer::make_state_offload() {
  const OffloadConfig& o = cfg_.offload;
  optim::StateOffload so;
  if (!swap_) return so;
  so.swap = swap_.get();
  so.unit_starts = parallel_->optimizer_unit_starts();
  so.buffer_count = o.buffer_count;
  so.buffer_bytes = offload_buffer_bytes(o);
  so.values_files = parallel_->optimizer_values_files();
  so.values_dtype = compute_dtype();
  so.grads_files = parallel_->optimizer_grads_files();
  so.grads_dtype = compute_dtype();
  return so;
}

// A deferred update (overlap across steps, ParallelGPT::defer_update).
bool Trainer::update_pending() const {
  return parallel_ && parallel_->update_pending();
}

void Trainer::finish_update() {
  if (parallel_) parallel_->finish_update();
}

}  // namespace kiri::train
