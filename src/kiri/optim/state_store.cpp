#include "kiri/optim/state_store.h"

#include <algorithm>
#include <cstdio>
#include <deque>

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
  }
  return "?";
}

// A staging buffer and what it holds: chunk `chunk` of units_, its transfers.
struct StateStore::Slot {
  int64_t chunk = -1;
  std::vector<offload::SwapSpace::Ticket> tickets;
  bool writing = false;
};

StateStore::StateStore(int64_t numel, bool master, const StateOffload& offload,
                       Allocator& allocator)
    : numel_(numel), master_(master), swap_(offload.swap), allocator_(allocator) {
  KIRI_CHECK(numel >= 0, "optimizer state of ", numel, " elements");
  if (!swap_) {
    for (int s = first_state(); s < kNumStates; ++s)
      mem_[s] = Tensor::zeros({numel}, DType::kF32, Category::kOptimizerStates, allocator);
    return;
  }
  const int64_t block = swap_->block_size();
  const int64_t per_block = block / 4;
  KIRI_CHECK_KIND(kConfig, offload.buffer_count >= 2,
                  "offload.buffer_count must be >= 2 (one chunk read while one is written), got ",
                  offload.buffer_count);
  chunk_elems_ = offload.buffer_bytes / (4 * num_states()) / per_block * per_block;
  KIRI_CHECK_KIND(kConfig, chunk_elems_ > 0,
                  "offload.buffer_mb = ", static_cast<double>(offload.buffer_bytes) / (1 << 20),
                  " MiB cannot hold one block of each of the ", num_states(), " offloaded states (",
                  num_states(), " x offload.block_size = ", format_bytes(num_states() * block),
                  ")");
  std::vector<int64_t> starts = offload.unit_starts;
  if (starts.empty()) starts = {0};
  KIRI_CHECK(starts.front() == 0 && std::is_sorted(starts.begin(), starts.end()),
             "offloaded state units must start at 0 and ascend");
  starts.push_back(numel);
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    if (starts[k + 1] <= starts[k]) continue;  // an empty unit (a shard of padding only)
    Unit u{starts[k], starts[k + 1]};
    for (int s = first_state(); s < kNumStates; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "unit%05zu.%s.swp", k, state_name(State(s)));
      u.file[s] = swap_->create(name, (u.end - u.begin) * 4, Category::kOptimizerStates);
    }
    units_.push_back(u);
  }
  // A small state needs no buffer bigger than itself, but at least one block per state.
  const int64_t slot_elems =
      std::min(chunk_elems_, (std::max<int64_t>(numel, 1) + per_block - 1) / per_block * per_block);
  const int64_t slot_bytes = slot_elems * 4 * num_states();
  for (int i = 0; i < offload.buffer_count; ++i)
    pool_.push_back(Tensor::empty({slot_bytes / 4}, DType::kF32, Category::kBuffers, allocator));
  // Every block starts written (zeros), so that a read never meets a block never written.
  for_each_chunk(false, true, [](Chunk&) {});
}

StateStore::~StateStore() = default;

Tensor& StateStore::tensor(State s) {
  KIRI_CHECK(!swap_, "the optimizer's ", state_name(s),
             " is offloaded to swap files: read it with read_state");
  KIRI_CHECK(has(s), "this optimizer keeps no master weights (fp32 values)");
  return mem_[static_cast<int>(s)];
}

void StateStore::for_each_chunk(bool read, bool write, const std::function<void(Chunk&)>& fn) {
  if (!swap_) {
    Chunk c;
    c.begin = 0;
    c.end = numel_;
    for (int s = first_state(); s < kNumStates; ++s) c.state[s] = mem_[s];
    fn(c);
    return;
  }
  swap_->check_files();  // a deleted or truncated file: an error before anything changes
  struct Piece {
    size_t unit;
    int64_t begin, end;
  };
  std::vector<Piece> chunks;
  for (size_t u = 0; u < units_.size(); ++u)
    for (int64_t b = units_[u].begin; b < units_[u].end; b += chunk_elems_)
      chunks.push_back({u, b, std::min(units_[u].end, b + chunk_elems_)});
  const int64_t nchunks = static_cast<int64_t>(chunks.size());
  const int64_t slot_stride = pool_.front().numel() / num_states();  // elements per state
  std::vector<Slot> slots(pool_.size());
  std::deque<size_t> writing;  // slots whose writes are in flight, oldest first
  auto view = [&](size_t slot, int s, int64_t n) {
    return pool_[slot].flat_range((s - first_state()) * slot_stride, n);
  };
  auto finish = [&](Slot& slot) {
    for (auto t : slot.tickets) swap_->wait(t);
    slot.tickets.clear();
  };
  // On an error every transfer still in flight lands before the buffers go.
  struct Drain {
    std::vector<Slot>& slots;
    offload::SwapSpace& swap;
    ~Drain() {
      for (Slot& s : slots)
        for (auto t : s.tickets) try {
            swap.wait(t);
          } catch (...) {
          }
    }
  } drain{slots, *swap_};
  auto free_slot = [&]() -> size_t {
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].chunk < 0) return i;
    const size_t oldest = writing.front();  // every slot busy: wait for the oldest write
    writing.pop_front();
    finish(slots[oldest]);
    slots[oldest] = Slot{};
    return oldest;
  };
  auto start = [&](int64_t c) {
    const size_t i = free_slot();
    slots[i].chunk = c;
    const Piece& p = chunks[static_cast<size_t>(c)];
    const Unit& u = units_[p.unit];
    for (int s = first_state(); s < kNumStates; ++s) {
      Tensor v = view(i, s, p.end - p.begin);
      if (read)
        slots[i].tickets.push_back(
            swap_->read(u.file[s], (p.begin - u.begin) * 4, v.raw(), (p.end - p.begin) * 4));
      else
        v.zero_();
    }
  };
  // At chunk c: reads of up to buffer_count - 2 chunks ahead, c itself, one write behind.
  const int64_t ahead = std::max<int64_t>(0, static_cast<int64_t>(pool_.size()) - 2);
  int64_t next = 0;
  for (int64_t c = 0; c < nchunks; ++c) {
    while (next < nchunks && next <= c + ahead) start(next++);
    size_t i = 0;
    while (slots[i].chunk != c) ++i;
    finish(slots[i]);
    const Piece& p = chunks[static_cast<size_t>(c)];
    Chunk chunk;
    chunk.begin = p.begin;
    chunk.end = p.end;
    for (int s = first_state(); s < kNumStates; ++s) chunk.state[s] = view(i, s, p.end - p.begin);
    fn(chunk);
    if (!write) {
      slots[i] = Slot{};
      continue;
    }
    const Unit& u = units_[p.unit];
    for (int s = first_state(); s < kNumStates; ++s)
      slots[i].tickets.push_back(swap_->write(u.file[s], (p.begin - u.begin) * 4,
                                              chunk.state[s].raw(), (p.end - p.begin) * 4));
    slots[i].writing = true;
    writing.push_back(i);
  }
  for (size_t i : writing) finish(slots[i]);
  for (Slot& s : slots) s = Slot{};
}

void StateStore::transfer_range(State s, int64_t offset, Tensor& data, bool write) {
  const int si = static_cast<int>(s);
  KIRI_CHECK(has(s), "this optimizer keeps no master weights (fp32 values)");
  KIRI_CHECK(data.dtype() == DType::kF32 && offset >= 0 && offset + data.numel() <= numel_,
             "optimizer ", state_name(s), " range [", offset, ", ", offset + data.numel(), ") of ",
             numel_, " elements (F32)");
  if (!swap_) {
    Tensor mine = mem_[si].flat_range(offset, data.numel());
    write ? mine.copy_from(data) : data.copy_from(mine);
    return;
  }
  const int64_t per_block = swap_->block_size() / 4;
  // Whole blocks through the first staging buffer: read (and, writing, modify and write).
  const int64_t cap = pool_.front().numel() / per_block * per_block;
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
    Tensor buf = pool_.front().flat_range(0, end - lo);
    swap_->wait(swap_->read(u->file[si], (lo - u->begin) * 4, buf.raw(), (end - lo) * 4));
    Tensor part = buf.flat_range(at - lo, take), mine = data.flat_range(done, take);
    if (write) {
      part.copy_from(mine);
      swap_->wait(swap_->write(u->file[si], (lo - u->begin) * 4, buf.raw(), (end - lo) * 4));
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
