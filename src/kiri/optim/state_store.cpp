#include "kiri/optim/state_store.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <limits>

#include "kiri/base/error.h"
#include "kiri/base/units.h"

namespace kiri::optim {

const char* state_name(State s) {
  switch (s) {
    case State::kMaster:
      return "master";
    case State::kExpAvg:
      return "exp_avg";
    case State::kExpAvgSq:
      return "exp_avg_sq";
    case State::kValues:
      return "values";
    case State::kGrads:
      return "grads";
  }
  return "?";
}

// A staging buffer and what it holds: chunk `chunk`, its transfers.
struct StateStore::Slot {
  int64_t chunk = -1;
  std::vector<offload::SwapSpace::Ticket> tickets;
};

StateStore::StateStore(int64_t numel, bool master, const StateOffload& offload,
                       Allocator& allocator)
    : numel_(numel), master_(master), swap_(offload.swap), allocator_(allocator) {
  KIRI_CHECK(numel >= 0, "optimizer state of ", numel, " elements");
  values_ = !offload.values_files.empty();
  values_dtype_ = offload.values_dtype;
  grads_ = !offload.grads_files.empty();
  grads_dtype_ = offload.grads_dtype;
  for (int s = 0; s < kNumStates; ++s)
    if (has(State(s))) states_.push_back(s);
  if (!swap_) {
    KIRI_CHECK(!values_ && !grads_, "offloaded values or gradients need a swap space");
    for (int s : states_)
      mem_[s] = Tensor::zeros({numel}, DType::kF32, Category::kOptimizerStates, allocator);
    return;
  }
  KIRI_CHECK_KIND(kConfig, offload.buffer_count >= 2,
                  "offload.buffer_count must be >= 2 (one chunk read while one is written), got ",
                  offload.buffer_count);
  // Chunks are whole granules: every state's offset in its file is then whole blocks.
  const int64_t block = swap_->block_size();
  int64_t per_elem = 0, smallest = 4;
  for (int s : states_) {
    per_elem += elem_size(s);
    smallest = std::min(smallest, elem_size(s));
  }
  const int64_t granule = block / smallest;
  chunk_elems_ = offload.buffer_bytes / per_elem / granule * granule;
  KIRI_CHECK_KIND(kConfig, chunk_elems_ > 0,
                  "offload.buffer_mb = ", static_cast<double>(offload.buffer_bytes) / (1 << 20),
                  " MiB cannot hold one block of each of the ", states_.size(),
                  " offloaded states (", format_bytes(granule * per_elem),
                  " at offload.block_size = ", format_bytes(block), ")");
  std::vector<int64_t> starts = offload.unit_starts;
  if (starts.empty()) starts = {0};
  KIRI_CHECK(starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()),
             "offloaded state units must start at 0 and ascend");
  KIRI_CHECK(!values_ || offload.values_files.size() == starts.size(),
             "parameter offload: ", offload.values_files.size(), " values files for ",
             starts.size(), " units");
  KIRI_CHECK(!grads_ || offload.grads_files.size() == starts.size(),
             "gradient offload: ", offload.grads_files.size(), " gradient files for ",
             starts.size(), " units");
  starts.push_back(numel);
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    if (starts[k + 1] <= starts[k]) continue;  // an empty unit (a shard of padding only)
    Unit u{starts[k], starts[k + 1]};
    for (int s : states_) {
      if (s == static_cast<int>(State::kValues) || s == static_cast<int>(State::kGrads)) {
        u.file[s] = s == static_cast<int>(State::kValues) ? offload.values_files[k]
                                                          : offload.grads_files[k];
        KIRI_CHECK(swap_->size(u.file[s]) == (u.end - u.begin) * elem_size(s), state_name(State(s)),
                   " file ", swap_->path(u.file[s]), " holds ", swap_->size(u.file[s]),
                   " bytes, unit ", k, " needs ", (u.end - u.begin) * elem_size(s));
        continue;
      }
      char name[64];
      std::snprintf(name, sizeof name, "unit%05zu.%s.swp", k, state_name(State(s)));
      u.file[s] = swap_->create(name, (u.end - u.begin) * 4, Category::kOptimizerStates);
    }
    units_.push_back(u);
  }
  // A small state needs no buffer bigger than itself.
  const int64_t slot_elems =
      std::min(chunk_elems_, (std::max<int64_t>(numel, 1) + granule - 1) / granule * granule);
  int64_t at = 0;
  for (int s : states_) {
    region_offset_[s] = at;
    at += slot_elems * elem_size(s);
  }
  for (int i = 0; i < offload.buffer_count; ++i)
    pool_.push_back(Tensor::empty({at / 4}, DType::kF32, Category::kBuffers, allocator));
  // Every block starts written (zeros), so that a read never meets a block never written.
  for_each_chunk(0, kAllStates | state_bit(State::kGrads), [](Chunk&) {});
}

StateStore::~StateStore() {
  abort_pass();
}

Tensor& StateStore::tensor(State s) {
  KIRI_CHECK(!swap_, "the optimizer's ", state_name(s),
             " is offloaded to swap files: read it with read_state");
  KIRI_CHECK(has(s) && s != State::kValues && s != State::kGrads, "this optimizer keeps no ",
             state_name(s), " (fp32 values have no master weights)");
  return mem_[static_cast<int>(s)];
}

// A pass in progress: its chunks, the staging buffers' contents and the transfers in flight.
struct StateStore::Pass {
  struct Piece {
    size_t unit;
    int64_t begin, end;
  };
  unsigned read = 0, write = 0;
  std::function<void(Chunk&)> fn;
  std::vector<Piece> chunks;
  std::vector<Slot> slots;
  std::deque<size_t> writing;  // slots whose writes are in flight, oldest first
  int64_t next = 0;            // the next chunk to start reading
  int64_t done = 0;            // chunks [0, done) have been through fn
};

void StateStore::for_each_chunk(unsigned read, unsigned write,
                                const std::function<void(Chunk&)>& fn) {
  begin_pass(read, write, fn);
  finish_pass();
}

void StateStore::begin_pass(unsigned read, unsigned write, std::function<void(Chunk&)> fn) {
  KIRI_CHECK(!pass_, "a pass over the optimizer states began while another is in progress");
  if (!swap_) {
    pass_ = std::make_unique<Pass>();
    pass_->fn = std::move(fn);
    return;
  }
  swap_->check_files();  // a deleted or truncated file: an error before anything changes
  auto pass = std::make_unique<Pass>();
  pass->read = read;
  pass->write = write;
  pass->fn = std::move(fn);
  for (size_t u = 0; u < units_.size(); ++u)
    for (int64_t b = units_[u].begin; b < units_[u].end; b += chunk_elems_)
      pass->chunks.push_back({u, b, std::min(units_[u].end, b + chunk_elems_)});
  pass->slots.resize(pool_.size());
  pass_ = std::move(pass);
  // The first reads start now, so that they run under whatever the caller does next.
  try {
    start_reads(0, true);
  } catch (...) {
    abort_pass();
    throw;
  }
}

Tensor StateStore::slot_view(size_t slot, int s, int64_t n) {
  char* base = static_cast<char*>(pool_[slot].raw()) + region_offset_[s];
  return Tensor::borrow(base, {n}, dtype_of(s));
}

void StateStore::finish_slot(Slot& slot) {
  for (auto t : slot.tickets) swap_->wait(t);
  slot.tickets.clear();
}

size_t StateStore::retire_oldest_write() {
  Pass& p = *pass_;
  const size_t i = p.writing.front();
  p.writing.pop_front();
  finish_slot(p.slots[i]);
  p.slots[i] = Slot{};
  return i;
}

bool StateStore::slot_ready(const Slot& slot) const {
  for (auto t : slot.tickets)
    if (!swap_->ready(t)) return false;
  return true;
}

bool StateStore::start_reads(int64_t c, bool block) {
  Pass& p = *pass_;
  // At chunk c: reads of up to buffer_count - 2 chunks ahead, c itself, one write behind.
  const int64_t ahead = std::max<int64_t>(0, static_cast<int64_t>(pool_.size()) - 2);
  const int64_t nchunks = static_cast<int64_t>(p.chunks.size());
  while (p.next < nchunks && p.next <= c + ahead) {
    size_t i = 0;
    while (i < p.slots.size() && p.slots[i].chunk >= 0) ++i;
    if (i == p.slots.size()) {  // every slot busy: the oldest write's is next
      if (p.writing.empty() || (!block && !slot_ready(p.slots[p.writing.front()]))) return false;
      i = retire_oldest_write();
    }
    const int64_t chunk = p.next++;
    p.slots[i].chunk = chunk;
    const Pass::Piece& piece = p.chunks[static_cast<size_t>(chunk)];
    const Unit& u = units_[piece.unit];
    for (int s : states_) {
      Tensor v = slot_view(i, s, piece.end - piece.begin);
      if (p.read & (1u << s))
        p.slots[i].tickets.push_back(swap_->read(u.file[s], (piece.begin - u.begin) * elem_size(s),
                                                 v.raw(),
                                                 (piece.end - piece.begin) * elem_size(s)));
      else
        v.zero_();
    }
  }
  return true;
}

void StateStore::run_chunk(int64_t c, bool block) {
  Pass& p = *pass_;
  start_reads(c, block);
  size_t i = 0;
  while (p.slots[i].chunk != c) ++i;
  finish_slot(p.slots[i]);
  const Pass::Piece& piece = p.chunks[static_cast<size_t>(c)];
  Chunk chunk;
  chunk.begin = piece.begin;
  chunk.end = piece.end;
  for (int s : states_) chunk.state[s] = slot_view(i, s, piece.end - piece.begin);
  p.fn(chunk);
  const Unit& u = units_[piece.unit];
  for (int s : states_)
    if (p.write & (1u << s))
      p.slots[i].tickets.push_back(swap_->write(u.file[s], (piece.begin - u.begin) * elem_size(s),
                                                chunk.state[s].raw(),
                                                (piece.end - piece.begin) * elem_size(s)));
  p.done = c + 1;
  if (p.slots[i].tickets.empty())
    p.slots[i] = Slot{};
  else
    p.writing.push_back(i);
  start_reads(c + 1, block);  // the next chunks' reads run under the caller's work
}

void StateStore::run_ready_chunks() {
  // Ahead of need, whatever does not block: the chunks whose reads have landed (their
  // update is due anyway), and the slots whose writes have, refilled with the next reads.
  Pass& p = *pass_;
  const int64_t nchunks = static_cast<int64_t>(p.chunks.size());
  for (;;) {
    while (!p.writing.empty() && slot_ready(p.slots[p.writing.front()])) retire_oldest_write();
    start_reads(p.done, false);
    if (p.done >= nchunks) return;
    size_t i = 0;
    while (i < p.slots.size() && p.slots[i].chunk != p.done) ++i;
    if (i == p.slots.size() || !slot_ready(p.slots[i])) return;
    run_chunk(p.done, false);
  }
}

void StateStore::advance_pass(int64_t end, bool wait_writes, bool run_ready) {
  KIRI_CHECK(pass_, "advance_pass() without a pass in progress");
  Pass& p = *pass_;
  if (!swap_) {  // in memory the whole state is one chunk
    if (p.done == 0 && end > 0) {
      Chunk c;
      c.end = numel_;
      for (int s : states_) c.state[s] = mem_[s];
      p.fn(c);
      p.done = 1;
    }
    return;
  }
  try {
    const int64_t nchunks = static_cast<int64_t>(p.chunks.size());
    while (p.done < nchunks && p.chunks[static_cast<size_t>(p.done)].begin < end)
      run_chunk(p.done, true);
    if (wait_writes) {
      // The writes of chunks before `end`: they are the oldest in flight.
      while (!p.writing.empty() &&
             p.chunks[static_cast<size_t>(p.slots[p.writing.front()].chunk)].begin < end)
        retire_oldest_write();
    }
    if (run_ready && end < std::numeric_limits<int64_t>::max()) run_ready_chunks();
  } catch (...) {
    abort_pass();
    throw;
  }
}

void StateStore::finish_pass() {
  if (!pass_) return;
  advance_pass(std::numeric_limits<int64_t>::max(), true);
  pass_.reset();
}

void StateStore::abort_pass() {
  if (!pass_) return;
  // Every transfer still in flight lands before its buffer can be reused or freed.
  for (Slot& s : pass_->slots)
    for (auto t : s.tickets) try {
        swap_->wait(t);
      } catch (...) {
      }
  pass_.reset();
}

void StateStore::transfer_range(State s, int64_t offset, Tensor& data, bool write) {
  const int si = static_cast<int>(s);
  KIRI_CHECK(has(s), "this optimizer keeps no ", state_name(s));
  KIRI_CHECK(data.dtype() == dtype_of(si) && offset >= 0 && offset + data.numel() <= numel_,
             "optimizer ", state_name(s), " range [", offset, ", ", offset + data.numel(), ") of ",
             numel_, " elements (", dtype_name(dtype_of(si)), ")");
  KIRI_CHECK(!swap_ || !pass_, "the optimizer's ", state_name(s),
             " was read or written during a pass over the states: finish the pass first");
  if (!swap_) {
    Tensor mine = mem_[si].flat_range(offset, data.numel());
    write ? mine.copy_from(data) : data.copy_from(mine);
    return;
  }
  const int64_t es = elem_size(si), per_block = swap_->block_size() / es;
  // Whole blocks through the first staging buffer: read (and, writing, modify and write).
  const int64_t cap = pool_.front().nbytes() / swap_->block_size() * per_block;
  int64_t done = 0;
  const int64_t n = data.numel();
  while (done < n) {
    const int64_t at = offset + done;
    auto u = std::upper_bound(units_.begin(), units_.end(), at,
                              [](int64_t x, const Unit& v) { return x < v.end; });
    KIRI_CHECK(u != units_.end() && u->begin <= at, "state element ", at, " lies in no unit");
    const int64_t lo = u->begin + (at - u->begin) / per_block * per_block;
    const int64_t want = at + (n - done);
    const int64_t end = std::min(
        {u->end, lo + cap, u->begin + (want - u->begin + per_block - 1) / per_block * per_block});
    const int64_t take = std::min(n - done, end - at);
    Tensor buf = Tensor::borrow(pool_.front().raw(), {end - lo}, dtype_of(si));
    swap_->wait(swap_->read(u->file[si], (lo - u->begin) * es, buf.raw(), (end - lo) * es));
    Tensor part = buf.flat_range(at - lo, take), mine = data.flat_range(done, take);
    if (write) {
      part.copy_from(mine);
      swap_->wait(swap_->write(u->file[si], (lo - u->begin) * es, buf.raw(), (end - lo) * es));
    } else {
      mine.copy_from(part);
    }
    done += take;
  }
}

void StateStore::read(State s, int64_t offset, Tensor& dst) {
  transfer_range(s, offset, dst, false);
}
void StateStore::write(State s, int64_t offset, const Tensor& src) {
  transfer_range(s, offset, const_cast<Tensor&>(src), true);
}

int64_t StateStore::bytes_read() const {
  return swap_ ? swap_->bytes_read() : 0;
}
int64_t StateStore::bytes_written() const {
  return swap_ ? swap_->bytes_written() : 0;
}

}  // namespace kiri::optim
