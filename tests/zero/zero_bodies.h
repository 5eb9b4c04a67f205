#pragma once
// ZeRO / FSDP test bodies shared by the local-backend tests (ranks as
// threads) and the mpirun tests (kiri_zero_tests_mpi2/4).
#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/model/gpt.h"

namespace kiri::train {

struct ZeroCase {
  int stage = 3;
  kiri::Precision dtype = kiri::Precision::kFp32;
  int grad_accum = 1;
  bool prefetch = true;
  int wrap_blocks = 1;
  int shard_group_size = 0;  // > 0 with stage 3: HYBRID_SHARD
  int checkpoint_every = 0;  // activation checkpointing of every k-th block
  // GPT-2 (2 blocks of 30, 2 heads) or a Llama (2 blocks of 24, 4 query heads, 2 key/value
  // heads, a SwiGLU of 64, an untied head).
  kiri::Arch arch = kiri::Arch::kGpt2;
};

// The case against stage 0 (DDP) of the same dtype on the same ranks and
// data: 10 losses within 1e-6 relative and the parameters within 1e-5 max
// abs in fp32; in bf16 / fp16 within the bounds lowp_tolerance.h derives
// from the unit roundoff (through whichever gemm_lowp path is set).
void zero_equivalence(comm::Communicator& world, ZeroCase c);
// bf16 / fp16 (stage c.stage) against fp32 stage 0: losses track within
// lowp_tolerance.h's bound.
void mixed_precision_tracks_fp32(comm::Communicator& world, ZeroCase c);
// Parameters, gradients and optimizer states per rank after the first step
// equal the formula exactly; the transient buffers' peak is bounded.
void zero_memory_matches_formula(comm::Communicator& world, ZeroCase c);
// Bytes sent per step: stages 1 and 2 as DDP, stage 3 1.5x (within 2%).
void zero_comm_volume(comm::Communicator& world);
// fp16 with an injected inf in step 3: exactly that step is skipped and
// the loss scale halves.
void fp16_skips_the_overflowing_step(comm::Communicator& world, int stage);
// A checkpoint saved under stage 3 on N ranks loads on 1 process, and the
// reverse; training continues with the same losses.
void zero_checkpoint_across_layouts(comm::Communicator& world, kiri::Arch arch = kiri::Arch::kGpt2);
// A missing or truncated optimizer shard is refused with a named error on
// every rank (and the checkpoint stays as it was).
void zero_checkpoint_refuses_bad_shards(comm::Communicator& world);

}  // namespace kiri::train
