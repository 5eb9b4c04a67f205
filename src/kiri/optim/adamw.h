#pragma once
// AdamW with fp32 states (m, v: 8 bytes per parameter element, category
// optimizer_states), decoupled weight decay applied only to the parameters
// that ask for it (matrices and embeddings, not biases or LayerNorm), and
// global gradient-norm clipping.
//
// The optimizer updates a list of segments: runs of one parameter's elements
// with their values and gradients. Without sharding a segment is a whole
// parameter of a ParameterStore; under ZeRO each rank updates only its
// shard, and its segments are the pieces of parameters in that shard. The
// states of all segments live in flat buffers of state_numel elements, each
// segment at its state_offset (a sharding engine may leave gaps: padding).
//
// Mixed precision: when the values are 16-bit (bf16, fp16), the optimizer
// keeps fp32 master weights (4 more bytes per element, category
// optimizer_states); the update runs on the master and rounds into the
// 16-bit values. The gradient norm is summed over `norm_group` when the
// gradients are sharded, so clipping never gathers them.
//
// Offload (ZeRO-Offload to NVMe, state_store.h): the master weights, m and v
// live in swap files instead of memory, and every pass over them (the step,
// initialize, write_back) streams them chunk by chunk through a small pool of
// staging buffers, reading ahead and writing behind. The update is elementwise,
// so a parameter cut at chunk boundaries gets bitwise the update it gets whole.
#include <cstdint>
#include <utility>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/config/adamw_config.h"
#include "kiri/nn/parameter_store.h"
#include "kiri/optim/state_store.h"

namespace kiri::optim {

// AdamWConfig: the config's (config/adamw_config.h).

// Linear warm-up from lr/warmup to lr over `warmup` steps, then cosine decay
// to min_lr at step `total` (steps are 0-based; the first step uses lr/warmup).
double lr_at(int64_t step, double lr, int64_t warmup, int64_t total, double min_lr);

using Segment = nn::ParameterSegment;

// Every parameter of the store, whole (no sharding): state offset = offset.
std::vector<Segment> whole_parameters(nn::ParameterStore& store);

class AdamW {
 public:
  // norm_groups: where the squared gradient norm is summed (the shard group
  // under ZeRO, the pipeline group; ranks holding the same values are not
  // in one group twice).
  AdamW(int64_t state_numel, std::vector<Segment> segments, const AdamWConfig& cfg,
        Allocator& allocator, std::vector<comm::Communicator*> norm_groups = {},
        const StateOffload& offload = {});
  AdamW(nn::ParameterStore& store, const AdamWConfig& cfg, Allocator& allocator);

  // Draws each segment's initial values (fp32, counter-based from (seed,
  // name, index), so any sharding draws the same numbers) into the master
  // weights, or the values themselves when they are fp32, and rounds them
  // into the 16-bit values.
  void initialize(uint64_t seed);
  // Global L2 norm of the gradients divided by grad_divisor (the loss scale),
  // summed over norm_group. Non-finite when any gradient is.
  double grad_norm(double grad_divisor = 1.0) const;
  // One update at learning rate lr with gradients multiplied by grad_scale.
  void step(double lr, double grad_scale);
  // Unscales by loss_scale, clips to cfg.grad_clip and steps; returns the
  // norm before clipping. A non-finite norm skips the update (fp16
  // overflow) and returns that norm: the caller's loss scaler backs off.
  double clip_and_step(double lr, double loss_scale = 1.0);
  // The same update in pieces (overlap across steps, ZeRO-Offload): begin_step starts
  // the pass over the states (the global norm is known by then); update_through(end)
  // updates every element of the flat state before `end` (whole chunks, in state =
  // forward order) and returns with the next chunks' I/O in flight, so the next forward
  // of a unit waits only for that unit's update; finish_step updates the rest and waits
  // for every write. Bitwise the update step() makes. The gradients of a state range
  // are read until update_through has passed it.
  void begin_step(double lr, double grad_scale);
  void update_through(int64_t state_end);
  void finish_step();
  bool step_pending() const { return states_.pass_active(); }
  // clip_and_step's norm and clipping, then begin_step (nothing begun when non-finite).
  double clip_and_begin_step(double lr, double loss_scale = 1.0);
  // The next step's zeroing of the gradients, fused into the update: with it on, each
  // update sets every gradient element it reads to 0 (kernels::AdamWParams::zero_grad),
  // and take_zeroed_grads() says once whether the last update did, so the caller skips
  // its own zeroing pass. Gradients in memory only (not offloaded_grads()).
  void set_zero_grads(bool on);
  bool take_zeroed_grads() { return std::exchange(grads_zeroed_, false); }
  // Copies the master weights into the 16-bit values (after loading them).
  void write_back();

  int64_t step_count() const { return step_; }
  void set_step_count(int64_t s) { step_ = s; }
  bool has_master() const { return states_.has(State::kMaster); }
  // The states as tensors: in memory only (offloaded(): raises; use read_state).
  Tensor& master() { return states_.tensor(State::kMaster); }        // [state_numel] F32, lowp only
  Tensor& exp_avg() { return states_.tensor(State::kExpAvg); }       // [state_numel] F32
  Tensor& exp_avg_sq() { return states_.tensor(State::kExpAvgSq); }  // [state_numel] F32
  const std::vector<Segment>& segments() const { return segments_; }
  int64_t state_numel() const { return states_.numel(); }
  // The fp32 weights of segment i as a tensor: its master slice, or its values when
  // fp32. In memory only (offloaded lowp masters: raises; use read_weights).
  Tensor weights(size_t i);
  // Elements [begin, begin + dst.numel()) of segment i's fp32 weights, copied out of
  // or into wherever they live (memory or swap). Writing a master does not touch the
  // 16-bit values: write_back() does.
  void read_weights(size_t i, int64_t begin, Tensor& dst);
  void write_weights(size_t i, int64_t begin, const Tensor& src);
  // Elements [offset, offset + n) of a flat state (any tier).
  void read_state(State s, int64_t offset, Tensor& dst) { states_.read(s, offset, dst); }
  void write_state(State s, int64_t offset, const Tensor& src) { states_.write(s, offset, src); }
  bool offloaded() const { return states_.offloaded(); }
  // Parameter offload: the segments' values live in swap too (StateOffload::values_files).
  bool offloaded_values() const { return states_.has(State::kValues); }
  // Gradient offload: the segments' gradients are read from swap (StateOffload::grads_files).
  bool offloaded_grads() const { return states_.has(State::kGrads); }
  StateStore& states() { return states_; }
  const AdamWConfig& config() const { return cfg_; }

 private:
  // Calls fn(i, a, b, chunk) for every piece [a, b) (segment-local) of every segment in
  // the chunk, in state order.
  template <typename Fn>
  void for_pieces(const StateStore::Chunk& chunk, Fn&& fn);
  // The values of piece [a, a + n) of segment i: in the chunk when offloaded, else in memory.
  Tensor value_of(const StateStore::Chunk& c, size_t i, int64_t a, int64_t n);

  std::vector<Segment> segments_;
  std::vector<size_t> by_state_;  // segment indices sorted by state_offset
  AdamWConfig cfg_;
  std::vector<comm::Communicator*> norm_groups_;
  Allocator& allocator_;
  StateStore states_;  // master (lowp only), m, v: [state_numel] F32 each
  int64_t step_ = 0;
  bool zero_grads_ = false;    // set_zero_grads
  bool zeroing_pass_ = false;  // the pass begun zeroes the gradients it reads
  bool grads_zeroed_ = false;  // the last finished pass did: take_zeroed_grads
};

}  // namespace kiri::optim
