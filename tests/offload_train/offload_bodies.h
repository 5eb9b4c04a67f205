#pragma once
// Optimizer and parameter offload against the same run in memory, on the same ranks
// and data. The same bodies run on ranks as threads (plain ctest) and on MPI ranks
// (kiri_offload_train_tests_mpi2/4).
#include <string>

#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/model/gpt.h"

namespace kiri::train {

struct OffloadCase {
  int stage = 0;
  int tp = 1;
  int pp = 1;
  kiri::Precision dtype = kiri::Precision::kFp32;
  int grad_accum = 1;
  bool parameters = false;  // offload.parameters = nvme too (stage 3)
  int buffer_count = 3;
  // offload.gradients (auto: nvme with parameter offload); nvme: stages 2-3.
  kiri::OffloadTier gradients = kiri::OffloadTier::kAuto;
  // GPT-2, or a Llama of the same blocks (zero_bodies.h's: grouped-query attention with 2
  // key/value heads, an untied head).
  kiri::Arch arch = kiri::Arch::kGpt2;
};

// The run's config: a tiny byte GPT, 10 steps; offloaded with 4 KiB blocks and 64 KiB
// buffers, so every parameter of any size is cut into chunks at odd places.
RunConfig offload_config(comm::Communicator& world, const OffloadCase& k, bool offload,
                         const std::string& path);
// 10 losses, and every rank's fp32 weights, m and v, bitwise equal with and without
// offload; RAM per category after the first step equals the run in memory with the
// offloaded bytes moved to the NVMe tier, exactly (gradients included when they are
// offloaded: between steps none is in RAM).
void offload_equals_memory(comm::Communicator& world, OffloadCase k);

}  // namespace kiri::train
