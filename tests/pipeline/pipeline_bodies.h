#pragma once
// Pipeline (and dp x pp) layouts against one process on the same global
// batch; shared by the local-backend tests and the mpirun tests.
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/model/gpt.h"

namespace kiri::train {

struct LayoutCase {
  int dp = 1, pp = 1, tp = 1;
  std::string schedule = "1f1b";
  int microbatches = 4;
  int virtual_stages = 1;
  int zero_stage = 0;
  bool bf16 = false;
  bool recompute = false;          // full activation checkpointing
  bool sequence_parallel = false;  // parallel.sequence_parallel (tp > 1)
  // Non-empty: parallel.activation_checkpointing = selective with these recompute_modules.
  std::vector<std::string> selective = {};
  // The model: GPT-2 (8 blocks of 32, 4 heads), or a Llama of the same blocks and width
  // with 8 query heads and max(2, tp) key/value heads, untied unless `tied`.
  kiri::Arch arch = kiri::Arch::kGpt2;
  bool tied = false;
  // Fine-tuning data: a chat corpus with a loss mask (the loss on the assistants' tokens).
  bool masked = false;
};

// 5 steps: losses within 1e-5 relative of 1x1x1, and the saved model within
// 1e-5 (bf16: of 1x1x1 bf16, within the bounds lowp_tolerance.h derives).
void layout_equivalence(comm::Communicator& world, LayoutCase c);
// k.selective set: layout_equivalence, and 5 steps of the layout with selective
// recomputation bitwise equal (losses, gradient norms, the model after) to the same layout
// without it.
void selective_equivalence(comm::Communicator& world, LayoutCase c);
// One step of tp (k.tp > 1) with and without sequence parallelism: the bytes the tp
// communicator sends differ by exactly the all-reduces of the norms' weight gradients (and
// with k.selective holding `layernorm`, the norms' outputs all-gathered again in backward).
void sequence_parallel_bytes(comm::Communicator& world, LayoutCase c);
// A checkpoint saved on this layout loads on 1 process (and the reverse);
// training continues with the same losses.
void layout_checkpoint_round_trip(comm::Communicator& world, LayoutCase c);

}  // namespace kiri::train
