#include "kiri/parallel/shard/sharded.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <iterator>

#include "kiri/kernels/ops.h"

namespace kiri::parallel {

struct ShardedDataParallel::Runtime {
  Tensor staged;  // [shard] parameter offload: the shard read from swap (buffers)
  offload::SwapSpace::Ticket read = 0;
  bool reading = false;     // `read` is in flight
  Tensor full;              // [padded] gathered parameters (stage 3, category buffers)
  comm::WorkHandle gather;  // its all-gather while outstanding
  bool bound = false;       // the parameters' values point into `full`
  Tensor full_grad;         // [padded] stages 2 and 3: the unit's gradient during backward
  Tensor reduce_out;        // [shard] what the reduce-scatter delivers
  comm::WorkHandle reduce;  // the reduce-scatter, then (hybrid) the replicas' all-reduce
  bool replica_pending = false;
  int forward_done = 0, backward_done = 0;  // groups of the unit done in this pass
  // Gradient offload: the unit's [shard] gradient (category buffers) while it is read
  // back, added to or written; at most one transfer of it in flight; whether the file
  // holds this accumulation's partial sum; whether the buffer is kept after its write
  // (the next micro-batch adds to it: no read back needed).
  enum class GradIo { kNone, kReading, kWriting };
  Tensor grad_buf;
  offload::SwapSpace::Ticket grad_ticket = 0;
  GradIo grad_io = GradIo::kNone;
  bool grad_on_disk = false;
  bool grad_keep = false;
};

std::vector<std::vector<int>> wrap_policy(int num_groups, int blocks_per_unit) {
  KIRI_CHECK_KIND(kConfig, blocks_per_unit >= 1, "parallel.wrap_blocks must be >= 1, got ",
                  blocks_per_unit);
  KIRI_CHECK(num_groups >= 2, "a model has at least the embedding and final groups");
  std::vector<std::vector<int>> units{{0}};
  for (int g = 1; g < num_groups - 1; g += blocks_per_unit) {
    units.emplace_back();
    for (int i = g; i < std::min(g + blocks_per_unit, num_groups - 1); ++i)
      units.back().push_back(i);
  }
  units.push_back({num_groups - 1});
  return units;
}

ShardedDataParallel::ShardedDataParallel(std::vector<std::vector<nn::Parameter*>> groups,
                                         std::vector<std::vector<int>> units,
                                         comm::Communicator& shard_group,
                                         comm::Communicator* replica_group,
                                         const ShardOptions& options, Allocator& allocator)
    : shard_group_(shard_group),
      replica_group_(replica_group),
      options_(options),
      allocator_(allocator) {
  KIRI_CHECK_KIND(kConfig, options.stage >= 1 && options.stage <= 3,
                  "the sharding engine runs ZeRO stages 1 to 3, got ", options.stage);
  const DType d = options.dtype;
  KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16,
             "sharded parameters are F32, BF16 or F16, got ", dtype_name(d));
  const int64_t full_total = build_units(groups, units);
  runtime_.resize(units_.size());
  allocate_state(full_total);
  build_segments();
}

// The units in order, each padded to a multiple of the shard group's size; returns the total
// of the padded units (the whole flat buffer's size).
int64_t ShardedDataParallel::build_units(const std::vector<std::vector<nn::Parameter*>>& groups,
                                         const std::vector<std::vector<int>>& units) {
  const int n = shard_group_.size();
  unit_of_group_.assign(groups.size(), -1);
  int expected = 0;
  int64_t full_total = 0;
  for (const auto& spec : units) {
    ShardUnit u;
    for (int g : spec) {
      KIRI_CHECK(g == expected, "wrap policy: units must take the groups in order, expected group ",
                 expected, ", got ", g);
      ++expected;
      unit_of_group_[g] = static_cast<int>(units_.size());
      u.groups.push_back(g);
      for (nn::Parameter* p : groups[g]) {
        u.params.push_back(p);
        u.param_offsets.push_back(u.numel);
        u.numel += p->numel();
      }
    }
    u.padded = (u.numel + n - 1) / n * n;
    u.shard = u.padded / n;
    u.full_offset = full_total;
    u.shard_offset = state_numel_;
    full_total += u.padded;
    state_numel_ += u.shard;
    units_.push_back(std::move(u));
  }
  KIRI_CHECK(expected == static_cast<int>(groups.size()), "wrap policy covers ", expected, " of ",
             groups.size(), " parameter groups");
  return full_total;
}

// The flat buffers the stage keeps whole (parameters below stage 3, gradients below stage 2),
// the shards it keeps of the rest, or their swap files when they are offloaded.
void ShardedDataParallel::allocate_state(int64_t full_total) {
  const ShardOptions& options = options_;
  const DType d = options.dtype;
  Allocator& allocator = allocator_;
  const bool full_params = options.stage < 3, full_grads = options.stage < 2;
  KIRI_CHECK_KIND(kConfig, !options.param_swap || options.stage == 3,
                  "offload.parameters = nvme needs ZeRO stage 3 (this run shards with stage ",
                  options.stage, ")");
  const bool offloaded = options.param_swap != nullptr;
  KIRI_CHECK_KIND(kConfig, !options.grad_swap || options.stage >= 2,
                  "offload.gradients = nvme needs ZeRO stage 2 or 3 (this run shards with stage ",
                  options.stage, ", which keeps whole gradients)");
  const bool grads_offloaded = options.grad_swap != nullptr;
  if (full_params)
    params_full_ = Tensor::zeros({full_total}, d, Category::kParameters, allocator);
  else if (!offloaded)
    params_shard_ = Tensor::zeros({state_numel_}, d, Category::kParameters, allocator);
  for (size_t k = 0; offloaded && k < units_.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "unit%05zu.params.swp", k);
    param_files_.push_back(options.param_swap->create(
        name, std::max<int64_t>(units_[k].shard, 1) * static_cast<int64_t>(dtype_size(d)),
        Category::kParameters));
  }
  if (full_grads)
    grads_full_ = Tensor::zeros({full_total}, d, Category::kGradients, allocator);
  else if (!grads_offloaded)
    grads_shard_ = Tensor::zeros({state_numel_}, d, Category::kGradients, allocator);
  for (size_t k = 0; grads_offloaded && k < units_.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "unit%05zu.grads.swp", k);
    grad_files_.push_back(options.grad_swap->create(
        name, std::max<int64_t>(units_[k].shard, 1) * static_cast<int64_t>(dtype_size(d)),
        Category::kGradients));
  }
}

// Each parameter's view into the whole buffers, and the segments of this rank's shard that
// the optimizer steps: where each lies in the shard, and its value and gradient views.
void ShardedDataParallel::build_segments() {
  const bool full_params = options_.stage < 3, full_grads = options_.stage < 2;
  const bool offloaded = options_.param_swap != nullptr;
  const bool grads_offloaded = options_.grad_swap != nullptr;
  const DType d = options_.dtype;
  const int64_t rank = shard_group_.rank();
  for (const ShardUnit& u : units_) {
    unit_segments_.emplace_back(segments_.size(), segments_.size());
    const int64_t lo = rank * u.shard, hi = lo + u.shard;
    for (size_t i = 0; i < u.params.size(); ++i) {
      nn::Parameter* p = u.params[i];
      const int64_t off = u.param_offsets[i];
      p->offset = -1;  // not in a ParameterStore
      p->value = full_params
                     ? params_full_.flat_range(u.full_offset + off, p->numel()).view(p->shape)
                     : Tensor();
      p->grad = full_grads ? grads_full_.flat_range(u.full_offset + off, p->numel()).view(p->shape)
                           : Tensor();
      const int64_t a = std::max(lo, off), b = std::min(hi, off + p->numel());
      if (a >= b) continue;
      nn::ParameterSegment s;
      s.param = p;
      s.begin = a - off;
      s.state_offset = u.shard_offset + (a - lo);
      s.value = full_params ? params_full_.flat_range(u.full_offset + a, b - a)
                : offloaded ? Tensor()  // in the swap file: the optimizer streams it
                            : params_shard_.flat_range(s.state_offset, b - a);
      s.grad = full_grads        ? grads_full_.flat_range(u.full_offset + a, b - a)
               : grads_offloaded ? Tensor()  // in the swap file: the optimizer streams it
                                 : grads_shard_.flat_range(s.state_offset, b - a);
      s.offloaded_numel = b - a;
      s.offloaded_dtype = d;
      segments_.push_back(std::move(s));
      unit_segments_.back().second = segments_.size();
    }
  }
  grad_sq_.assign(segments_.size(), 0.0);  // not resized again: the segments point into it
  for (size_t i = 0; grads_offloaded && i < segments_.size(); ++i)
    segments_[i].grad_sq = &grad_sq_[i];
}

ShardedDataParallel::~ShardedDataParallel() {
  // Transfers into this engine's buffers land before the buffers are freed.
  for (Runtime& rt : runtime_) try {
      if (rt.reading) options_.param_swap->wait(rt.read);
      if (rt.grad_io != Runtime::GradIo::kNone) options_.grad_swap->wait(rt.grad_ticket);
    } catch (...) {  // an I/O error has been reported where it happened
    }
}

int ShardedDataParallel::next_unit(int unit, bool backward) const {
  const int last = static_cast<int>(units_.size()) - 1;
  // Forward runs the units in order; backward starts with unit 0 (the tied
  // LM head), then runs from the last unit down to unit 1 (untied: down to 0).
  if (!backward) return unit < last ? unit + 1 : -1;
  if (!options_.tied_head) return unit - 1;
  if (unit == 0) return last > 0 ? last : -1;
  return unit > 1 ? unit - 1 : -1;
}

void ShardedDataParallel::read_shard(int unit) {
  Runtime& rt = runtime_[unit];
  if (!options_.param_swap || rt.bound || rt.gather || rt.reading || rt.staged.defined()) return;
  if (before_read_) before_read_(unit);
  const ShardUnit& u = units_[unit];
  // Whole pages: the allocator aligns them for O_DIRECT, which reads whole pages.
  const int64_t es = static_cast<int64_t>(dtype_size(options_.dtype));
  const int64_t room = (u.shard * es + 4095) / 4096 * 4096 / es;
  rt.staged =
      Tensor::empty({room}, options_.dtype, Category::kBuffers, allocator_).flat_range(0, u.shard);
  rt.read = options_.param_swap->read(param_files_[unit], 0, rt.staged.raw(), u.shard * es);
  rt.reading = true;
}

void ShardedDataParallel::gather(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.bound || rt.gather) return;
  const ShardUnit& u = units_[unit];
  Tensor shard;
  if (options_.param_swap) {
    read_shard(unit);
    rt.reading = false;
    options_.param_swap->wait(rt.read);  // kIo (checksum, truncation) names the file
    shard = rt.staged;
  } else {
    if (before_read_) before_read_(unit);
    shard = params_shard_.flat_range(u.shard_offset, u.shard);
  }
  rt.full = Tensor::empty({u.padded}, options_.dtype, Category::kBuffers, allocator_);
  rt.gather = shard_group_.all_gather_async(shard, rt.full);
}

void ShardedDataParallel::wait_gathered(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.bound) return;
  gather(unit);
  rt.gather->wait();
  rt.gather.reset();
  rt.staged = Tensor();
  const ShardUnit& u = units_[unit];
  for (size_t i = 0; i < u.params.size(); ++i)
    u.params[i]->value =
        rt.full.flat_range(u.param_offsets[i], u.params[i]->numel()).view(u.params[i]->shape);
  rt.bound = true;
}

void ShardedDataParallel::release(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.gather) rt.gather->wait();  // a prefetch nobody used: let it land first
  rt.gather.reset();
  if (rt.reading) options_.param_swap->wait(rt.read);
  rt.reading = false;
  rt.staged = Tensor();
  for (nn::Parameter* p : units_[unit].params) p->value = Tensor();
  rt.full = Tensor();
  rt.bound = false;
}

void ShardedDataParallel::bind_grads(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.full_grad.defined() && !rt.reduce) return;  // a unit of several groups
  KIRI_CHECK(!rt.reduce, "unit ", unit,
             " starts backward while its last gradient is still being reduced: call "
             "finalize_grads() after each backward");
  const ShardUnit& u = units_[unit];
  rt.full_grad = Tensor::zeros({u.padded}, options_.dtype, Category::kBuffers, allocator_);
  for (size_t i = 0; i < u.params.size(); ++i)
    u.params[i]->grad =
        rt.full_grad.flat_range(u.param_offsets[i], u.params[i]->numel()).view(u.params[i]->shape);
}

void ShardedDataParallel::before_forward(int group) {
  const int unit = unit_of_group_.at(group);
  if (options_.stage < 3) return;
  wait_gathered(unit);
  if (options_.prefetch)
    if (int next = next_unit(unit, false); next >= 0) {
      gather(next);
      if (int after = next_unit(next, false); after >= 0) read_shard(after);  // disk leads
    }
}

void ShardedDataParallel::after_forward(int group) {
  const int unit = unit_of_group_.at(group);
  Runtime& rt = runtime_[unit];
  if (++rt.forward_done < static_cast<int>(units_[unit].groups.size())) return;
  rt.forward_done = 0;
  if (options_.stage == 3) release(unit);  // reshard after forward
}

void ShardedDataParallel::before_backward(int group) {
  const int unit = unit_of_group_.at(group);
  if (options_.stage == 3) {
    wait_gathered(unit);
    if (options_.prefetch)
      if (int next = next_unit(unit, true); next >= 0) {
        gather(next);
        if (int after = next_unit(next, true); after >= 0) read_shard(after);
      }
  }
  if (options_.stage >= 2) bind_grads(unit);
  prefetch_grad(unit);  // the partial sum its reduction will add to, read under its backward
}

void ShardedDataParallel::after_backward(int group) {
  const int unit = unit_of_group_.at(group);
  Runtime& rt = runtime_[unit];
  if (++rt.backward_done < static_cast<int>(units_[unit].groups.size())) return;
  rt.backward_done = 0;
  if (options_.stage == 3) release(unit);
  if (options_.stage >= 2 || sync_) start_reduce(unit);
  progress();
  // Unit 0 (the embeddings, with the tied LM head) ends backward: wait for every
  // reduction so that none outlives it (as DeepSpeed syncs its reduction stream).
  if (unit == 0) complete_reduces(true);
}

void ShardedDataParallel::start_reduce(int unit) {
  Runtime& rt = runtime_[unit];
  const ShardUnit& u = units_[unit];
  KIRI_CHECK(!rt.reduce, "unit ", unit, " is reduced twice in one backward");
  // The cap: a rank ahead of its peers waits for its oldest reduction rather than
  // keep more units' buffers alive. Every rank starts the same reductions in the
  // same order; only when it waits depends on timing, and it waits oldest first.
  complete_reduces(false);
  while (order_.size() >= static_cast<size_t>(kMaxInflightReductions)) wait_oldest();
  Tensor input =
      options_.stage == 1 ? grads_full_.flat_range(u.full_offset, u.padded) : rt.full_grad;
  rt.reduce_out = Tensor::empty({u.shard}, options_.dtype, Category::kBuffers, allocator_);
  rt.reduce = shard_group_.reduce_scatter_async(input, rt.reduce_out, comm::ReduceOp::kSum);
  order_.push_back(unit);
  if (options_.stage >= 2)  // the Work keeps the buffer alive until it completes
    for (nn::Parameter* p : u.params) p->grad = Tensor();
}

void ShardedDataParallel::complete_reduces(bool block) {
  bool in_order = true;
  for (auto it = order_.begin(); it != order_.end();)
    it = advance_reduce(*it, block, in_order) ? order_.erase(it) : std::next(it);
}

void ShardedDataParallel::wait_oldest() {
  bool in_order = true;
  advance_reduce(order_.front(), true, in_order);
  order_.pop_front();
}

bool ShardedDataParallel::advance_reduce(int unit, bool block, bool& in_order) {
  Runtime& rt = runtime_[unit];
  auto done = [block](comm::Work& w) {
    if (!block) return w.test();
    w.wait();
    return true;
  };
  // Hybrid: the replicas' all-reduces are collectives on another group and must
  // start in the same order on every rank: the order the reduce-scatters started in.
  if (replica_group_ && replica_group_->size() > 1 && !rt.replica_pending) {
    if (!in_order || !done(*rt.reduce)) {
      in_order = false;
      return false;
    }
    rt.replica_pending = true;
    rt.reduce = replica_group_->all_reduce_async(rt.reduce_out, comm::ReduceOp::kSum);
  }
  if (!done(*rt.reduce)) return false;
  finish_reduce(unit);
  return true;
}

void ShardedDataParallel::finish_reduce(int unit) {
  Runtime& rt = runtime_[unit];
  const ShardUnit& u = units_[unit];
  if (options_.stage == 1) {
    Tensor mine = grads_full_.flat_range(u.full_offset + shard_group_.rank() * u.shard, u.shard);
    mine.copy_from(rt.reduce_out);
  } else {
    // Gradient offload: the last unit's write had this unit's backward to land; it is
    // retired before this unit's sum takes a buffer, so one unit's gradient is in RAM.
    if (options_.grad_swap) retire_grad_io(true);
    Tensor acc = options_.grad_swap ? take_grad_accumulator(unit)
                                    : grads_shard_.flat_range(u.shard_offset, u.shard);
    if (options_.dtype == DType::kF32) {
      kernels::add_into(acc, rt.reduce_out);
    } else {  // 16-bit: add through fp32
      Tensor wide = Tensor::empty({u.shard}, DType::kF32, Category::kBuffers, allocator_);
      kernels::convert(wide, rt.reduce_out);
      kernels::add_into(acc, wide);
    }
    if (options_.grad_swap) offload_grad(unit, acc);
  }
  rt.reduce.reset();
  rt.reduce_out = rt.full_grad = Tensor();
  rt.replica_pending = false;
}

void ShardedDataParallel::progress() {
  shard_group_.progress();
  if (replica_group_) replica_group_->progress();
  complete_reduces(false);
  retire_grad_io(false);
}

void ShardedDataParallel::finalize_grads() {
  complete_reduces(true);
  // The last micro-batch's gradients are on disk before the optimizer reads them.
  retire_grad_io(sync_);
}

void ShardedDataParallel::reduce_gradients() {
  KIRI_CHECK(options_.stage == 1, "reduce_gradients() is for stage 1, which keeps whole gradients");
  for (size_t unit = 0; unit < units_.size(); ++unit)
    if (!runtime_[unit].reduce) start_reduce(static_cast<int>(unit));
  finalize_grads();
}

void ShardedDataParallel::zero_grad() {
  if (grads_full_.defined()) grads_full_.zero_();
  if (grads_shard_.defined()) grads_shard_.zero_();
  for (int unit = 0; unit < static_cast<int>(units_.size()); ++unit) drop_unit_grad(unit);
}

void ShardedDataParallel::gather_parameters() {
  if (options_.stage == 3) return;
  for (int unit = 0; unit < static_cast<int>(units_.size()); ++unit) gather_unit_parameters(unit);
}

void ShardedDataParallel::gather_unit_parameters(int unit) {
  if (options_.stage == 3) return;
  const ShardUnit& u = units_.at(unit);
  // The shard is copied out first: all_gather's input may not alias its output.
  Tensor mine = Tensor::empty({u.shard}, options_.dtype, Category::kBuffers, allocator_);
  mine.copy_from(params_full_.flat_range(u.full_offset + shard_group_.rank() * u.shard, u.shard));
  Tensor full = params_full_.flat_range(u.full_offset, u.padded);
  shard_group_.all_gather(mine, full);
}

void ShardedDataParallel::zero_unit_grad(int unit) {
  const ShardUnit& u = units_.at(unit);
  if (grads_full_.defined()) grads_full_.flat_range(u.full_offset, u.padded).zero_();
  if (grads_shard_.defined()) grads_shard_.flat_range(u.shard_offset, u.shard).zero_();
  drop_unit_grad(unit);
}

Tensor ShardedDataParallel::grad_buffer(int unit) {
  // Whole pages: the allocator aligns them for O_DIRECT, which moves whole pages.
  const int64_t es = static_cast<int64_t>(dtype_size(options_.dtype));
  const int64_t shard = units_[unit].shard, room = (shard * es + 4095) / 4096 * 4096 / es;
  // Staging, as the parameter shards read from swap: category buffers (between steps no
  // gradient is in RAM, and the gradients' RAM is 0).
  return Tensor::empty({room}, options_.dtype, Category::kBuffers, allocator_).flat_range(0, shard);
}

void ShardedDataParallel::prefetch_grad(int unit) {
  Runtime& rt = runtime_[unit];
  if (!options_.grad_swap || !rt.grad_on_disk || units_[unit].shard == 0) return;
  if (rt.grad_buf.defined()) {  // being read, or its write's buffer: it holds the sum
    rt.grad_keep = true;
    return;
  }
  const int64_t bytes = units_[unit].shard * static_cast<int64_t>(dtype_size(options_.dtype));
  rt.grad_buf = grad_buffer(unit);
  rt.grad_ticket = options_.grad_swap->read(grad_files_[unit], 0, rt.grad_buf.raw(), bytes);
  rt.grad_io = Runtime::GradIo::kReading;
}

Tensor ShardedDataParallel::take_grad_accumulator(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.grad_on_disk) prefetch_grad(unit);  // (started at its backward, unless missed)
  if (rt.grad_io != Runtime::GradIo::kNone) {
    rt.grad_io = Runtime::GradIo::kNone;
    std::erase(grad_writes_, unit);
    options_.grad_swap->wait(rt.grad_ticket);  // kIo (checksum, truncation) names the file
  }
  Tensor acc = rt.grad_on_disk ? rt.grad_buf : Tensor();
  rt.grad_buf = Tensor();
  rt.grad_keep = false;
  if (!acc.defined()) {  // the accumulation's first: zeros, as the shard in memory starts
    acc = grad_buffer(unit);
    acc.zero_();
  }
  return acc;
}

void ShardedDataParallel::offload_grad(int unit, Tensor acc) {
  Runtime& rt = runtime_[unit];
  const ShardUnit& u = units_[unit];
  if (sync_)  // the step's final gradient: its part of the global norm, as AdamW takes it
    for (size_t i = unit_segments_[unit].first; i < unit_segments_[unit].second; ++i) {
      const nn::ParameterSegment& s = segments_[i];
      grad_sq_[i] =
          kernels::sum_of_squares(acc.flat_range(s.state_offset - u.shard_offset, s.numel()));
    }
  rt.grad_on_disk = true;
  if (u.shard == 0) return;
  rt.grad_buf = std::move(acc);
  rt.grad_ticket =
      options_.grad_swap->write(grad_files_[unit], 0, rt.grad_buf.raw(),
                                u.shard * static_cast<int64_t>(dtype_size(options_.dtype)));
  rt.grad_io = Runtime::GradIo::kWriting;
  grad_writes_.push_back(unit);
  while (grad_writes_.size() > static_cast<size_t>(kMaxInflightGradWrites)) {
    retire_grad_write(grad_writes_.front());
    grad_writes_.pop_front();
  }
}

void ShardedDataParallel::retire_grad_write(int unit) {
  Runtime& rt = runtime_[unit];
  if (rt.grad_io != Runtime::GradIo::kWriting) return;  // taken or dropped meanwhile
  rt.grad_io = Runtime::GradIo::kNone;
  options_.grad_swap->wait(rt.grad_ticket);  // kIo names the file
  if (!rt.grad_keep) rt.grad_buf = Tensor();
}

void ShardedDataParallel::retire_grad_io(bool block) {
  while (!grad_writes_.empty()) {
    const Runtime& rt = runtime_[grad_writes_.front()];
    if (!block && rt.grad_io == Runtime::GradIo::kWriting &&
        !options_.grad_swap->ready(rt.grad_ticket))
      return;
    retire_grad_write(grad_writes_.front());
    grad_writes_.pop_front();
  }
}

void ShardedDataParallel::drop_unit_grad(int unit) {
  if (!options_.grad_swap) return;
  Runtime& rt = runtime_[unit];
  if (rt.grad_io != Runtime::GradIo::kNone) {
    rt.grad_io = Runtime::GradIo::kNone;
    std::erase(grad_writes_, unit);
    options_.grad_swap->wait(rt.grad_ticket);
  }
  rt.grad_buf = Tensor();
  rt.grad_on_disk = rt.grad_keep = false;
  for (size_t i = unit_segments_[unit].first; i < unit_segments_[unit].second; ++i) grad_sq_[i] = 0;
}

void ShardedDataParallel::all_gather_unit(int unit, const Tensor& shard, Tensor& full) {
  const ShardUnit& u = units_.at(unit);
  KIRI_CHECK(shard.numel() == u.shard && full.numel() == u.padded, "unit ", unit, " gathers ",
             u.shard, " -> ", u.padded, " elements, got ", shard.numel(), " -> ", full.numel());
  shard_group_.all_gather(shard, full);
}

}  // namespace kiri::parallel
