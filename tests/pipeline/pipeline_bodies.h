#pragma once
// Pipeline (and dp x pp) layouts against one process on the same global
// batch; shared by the local-backend tests and the mpirun tests.
#include <string>

#include "kiri/comm/communicator.h"

namespace kiri::train {

struct LayoutCase {
  int dp = 1, pp = 1, tp = 1;
  std::string schedule = "1f1b";
  int microbatches = 4;
  int virtual_stages = 1;
  int zero_stage = 0;
  bool bf16 = false;
  bool recompute = false;  // full activation checkpointing
};

// 5 steps: losses within 1e-5 relative of 1x1x1, and the saved model within
// 1e-5 (bf16: of 1x1x1 bf16, within the bounds lowp_tolerance.h derives).
void layout_equivalence(comm::Communicator& world, LayoutCase c);
// A checkpoint saved on this layout loads on 1 process (and the reverse);
// training continues with the same losses.
void layout_checkpoint_round_trip(comm::Communicator& world, LayoutCase c);

}  // namespace kiri::train
