#pragma once
// Test bodies shared by the local-backend tests and the mpirun tests.
#include "kiri/comm/communicator.h"

namespace kiri::train {

struct DdpCase {
  double bucket_mb = 25;
  int grad_accum = 1;
};

// DDP over world.size() ranks vs one process with the same global batch:
// parameters after 10 steps within 1e-5 (max abs), losses within 1e-5 relative.
void ddp_equivalence(comm::Communicator& world, DdpCase c);
// The all-reduce volume counted per step equals the documented formula.
void ddp_bytes_match_formula(comm::Communicator& world);

}  // namespace kiri::train
