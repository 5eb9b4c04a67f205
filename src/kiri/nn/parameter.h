#pragma once
// A Parameter is a named, shaped piece of the model's state. Its name is the
// Hugging Face GPT-2 name ("transformer.h.0.attn.c_attn.weight"), so a
// checkpoint maps one to one onto GPT2LMHeadModel. Values and gradients are
// views into flat buffers owned by a ParameterStore (one allocation each, as
// in llm.c), which is what DDP buckets and ZeRO units later cut into pieces.
#include <string>
#include <vector>

#include "kiri/tensor/tensor.h"

namespace kiri::nn {

enum class InitKind { kZeros, kOnes, kNormal };

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  double std = 0.0;  // for kNormal (mean 0)
};

// How a parameter is cut over tensor-parallel ranks (Megatron's
// partition_dim): `shape` is the rank's part, `full` the whole parameter's
// (the checkpoint's). dim 1 of a matrix = column parallel (c_attn, c_fc; a
// dimension of `blocks` equal blocks, q|k|v, is cut block by block), dim 0 =
// row parallel (c_proj) or vocab parallel (wte, whose rows may be padded
// beyond full[0] to a multiple of the parts: padding rows exist only here).
struct TpSplit {
  int dim = -1;  // -1: replicated on every tensor-parallel rank
  int parts = 1;
  int index = 0;
  int blocks = 1;
};

// A run of a parameter's elements: `length` elements from `local` in this
// rank's part are elements from `global` of the whole parameter.
struct ElementRun {
  int64_t local, global, length;
};

struct Parameter {
  std::string name;
  Shape shape;
  Shape full;  // the whole parameter's shape (= shape unless tensor parallel)
  TpSplit tp;
  bool weight_decay = false;  // AdamW decays matrices and embeddings, not biases or LayerNorm
  InitSpec init;
  Tensor value;         // bound by ParameterStore
  Tensor grad;          // bound by ParameterStore; backward accumulates into it
  int64_t offset = -1;  // element offset in the store's flat buffers

  int64_t numel() const { return shape.numel(); }
  int64_t full_numel() const { return full.rank() ? full.numel() : shape.numel(); }
};

// The rank's elements of p in order, as runs of the whole parameter's
// elements (padding rows of a vocab-parallel table map to none).
std::vector<ElementRun> element_runs(const Parameter& p);

// A run of one parameter's elements that a rank updates: a whole parameter
// without sharding, a piece of it in the rank's shard under ZeRO. The
// optimizer keeps its states for the segment at state_offset of its flat
// state buffers.
struct ParameterSegment {
  Parameter* param = nullptr;
  int64_t begin = 0;         // first element of the parameter in this segment
  int64_t state_offset = 0;  // where the segment starts in the optimizer's flat states
  // [n] the values to update (F32, BF16 or F16); undefined when they are offloaded
  // (the optimizer streams them from swap: optim/state_store.h).
  Tensor value;
  // [n] their gradient, the values' dtype; undefined when the gradients are offloaded
  // (the sharding engine writes each unit's reduced shard to swap and the optimizer
  // streams it with its states), and then described by the three fields below.
  Tensor grad;
  // False for a copy that another rank also holds and counts (the last
  // pipeline stage's copy of the tied embedding): the global gradient norm
  // must count every element once.
  bool counted_in_norm = true;
  // Offloaded gradients: the segment's size and the gradient's dtype, and where the
  // engine leaves the sum of squares of the step's final gradient (the global norm's
  // part, computed before the gradient left memory).
  int64_t offloaded_numel = 0;
  DType offloaded_dtype = DType::kF32;
  const double* grad_sq = nullptr;

  int64_t numel() const { return grad.defined() ? grad.numel() : offloaded_numel; }
  DType grad_dtype() const { return grad.defined() ? grad.dtype() : offloaded_dtype; }
  bool grad_offloaded() const { return !grad.defined(); }
};

}  // namespace kiri::nn
