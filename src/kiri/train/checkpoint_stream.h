#pragma once
// Checkpoints by streaming (docs/checkpoints.md, "Streaming"): the trainer's checkpoint code
// reaches the optimizer's states and the fp32 weights only through AdamW's ranged API
// (read_state / read_weights and their writes), which works on any tier (memory, or swap
// files under offload), and moves them in pieces of at most checkpoint.piece_size. A save
// or a resume so holds a piece of a state, one sharding unit and one whole parameter at a
// time, never a whole state nor the whole model: a checkpoint of an offloaded run does not
// bring back into RAM what offload moved out of it.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiri/ckpt/safetensors.h"
#include "kiri/config/run_config.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/parallel/dims.h"

namespace kiri::train {

// Elements per piece for checkpoint.piece_size (F32 elements, at least one).
int64_t checkpoint_piece_elements(const CheckpointConfig& cfg);

// Calls fn(begin, n) for consecutive pieces [begin, begin + n) of [0, total), n <= piece.
void for_each_piece(int64_t total, int64_t piece, const std::function<void(int64_t, int64_t)>& fn);

// A segment's elements as runs of the whole parameter: `length` elements from `global` whose
// optimizer state starts at `state` (the coordinates an optimizer file's segments are in, so
// that a save and a resume on another layout agree on them).
struct GlobalPiece {
  int64_t global, length, state;
};
std::vector<GlobalPiece> global_pieces(const nn::ParameterSegment& s);

// check_finite of a piece: `t` holds elements [first, first + t.numel()) of a tensor of
// `total` elements, and the message names the element in the whole tensor.
void check_finite_piece(const Tensor& t, const std::string& what, int64_t first, int64_t total);

// This rank's parameters in fp32, one whole parameter at a time, in the order the rank holds
// them (a subsequence of the whole model's): under sharding a unit is read (in pieces) and
// all-gathered when its first parameter is asked for; under tensor parallelism each
// parameter is assembled over tp. Collective: every rank of the stage calls next() to the
// end. The ranks that keep nothing (dp > 0; tp > 0 after the assembly) get undefined
// tensors. The last stage's copy of the tied embedding is left out.
class LocalParams {
 public:
  LocalParams(optim::AdamW& optimizer, model::ParallelGPT& parallel, parallel::ParallelDims& dims,
              Allocator& allocator, int64_t piece);
  // False at the end; else *p and *value (valid until the next call).
  bool next(nn::Parameter** p, Tensor* value);

 private:
  bool load_item();  // the next unit (sharded) or segment (stage 0); false at the end

  optim::AdamW& optimizer_;
  model::ParallelGPT& parallel_;
  parallel::ParallelDims& dims_;
  Allocator& allocator_;
  int64_t piece_;
  bool keep_;        // dp rank 0 of the stage: the gathered values are kept
  size_t item_ = 0;  // next unit or segment
  Tensor full_;      // the gathered unit
  std::vector<std::pair<nn::Parameter*, Tensor>> pending_;  // of the current item
  size_t at_ = 0;
  Tensor assembled_;
};

// The whole model's fp32 parameters in the whole model's order (as model::GPT<float> lists
// them, kiri's Hugging Face names), one at a time, on the job's rank 0: its own from
// LocalParams, those of pipeline stage s received from that stage's dp 0 / tp 0 rank in
// turn. Collective: rank 0 calls next() for every spec, every other rank calls run().
class ModelStream {
 public:
  ModelStream(const RunConfig& cfg, optim::AdamW& optimizer, model::ParallelGPT& parallel,
              parallel::ParallelDims& dims, Allocator& allocator);
  // Name, F32 and the whole shape of every parameter, in order.
  const std::vector<ckpt::TensorSpec>& specs() const { return specs_; }
  // Rank 0: parameter k (k counting up from 0), valid until the next call.
  const Tensor& next(size_t k);
  // Rank 0, after the last next(): the units that hold nothing it writes (a stage's empty
  // unit, the tied copy's), whose gathers the other ranks of its stage still take part in.
  void finish();
  // Every other rank: this rank's part (gathers, sends) to the end.
  void run();

 private:
  std::vector<ckpt::TensorSpec> specs_;
  std::vector<int> stage_;  // of each spec: the pipeline stage that holds it
  std::vector<int> tags_;   // per stage: the next message's tag
  parallel::ParallelDims& dims_;
  Allocator& allocator_;
  LocalParams local_;
  size_t next_ = 0;
  Tensor received_;
};

}  // namespace kiri::train
