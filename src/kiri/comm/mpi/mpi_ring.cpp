#include "kiri/comm/mpi/mpi_ring.h"

#include <algorithm>
#include <limits>
#include <mutex>

namespace kiri::comm::detail {
namespace {

// Plain loops over restrict pointers: the compiler vectorises them.
template <typename T>
void reduce_into(T* __restrict a, const T* __restrict b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (int64_t i = 0; i < n; ++i) a[i] = a[i] < b[i] ? b[i] : a[i];
  } else {
    for (int64_t i = 0; i < n; ++i) a[i] += b[i];
  }
}

// 16-bit floats: f32 arithmetic, rounded back (as MPI's user ops for them, mpi_handles.cpp).
template <float (*load)(uint16_t), uint16_t (*store)(float)>
void reduce_half(uint16_t* __restrict a, const uint16_t* __restrict b, int64_t n, ReduceOp op) {
  if (op == ReduceOp::kMax) {
    for (int64_t i = 0; i < n; ++i)
      if (load(b[i]) > load(a[i])) a[i] = b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) a[i] = store(load(a[i]) + load(b[i]));
  }
}

}  // namespace

void combine(void* acc, const void* b, int64_t n, DType dtype, ReduceOp op) {
  auto* h = static_cast<uint16_t*>(acc);
  const auto* hb = static_cast<const uint16_t*>(b);
  switch (dtype) {
    case DType::kF64:
      return reduce_into(static_cast<double*>(acc), static_cast<const double*>(b), n, op);
    case DType::kBF16:
      return reduce_half<bf16_to_float, float_to_bf16>(h, hb, n, op);
    case DType::kF16:
      return reduce_half<half_to_float, float_to_half>(h, hb, n, op);
    default:
      return reduce_into(static_cast<float*>(acc), static_cast<const float*>(b), n, op);
  }
}

namespace {

// Scratch buffers outlive their all-reduces: a fresh 25 MB allocation is
// fresh pages (unless MpiRuntime tuned malloc), whose faults and zeroing
// cost as much as the reduction.
std::mutex pool_mutex;
std::vector<std::pair<std::unique_ptr<char[]>, int64_t>>& pool() {
  static auto* p = new std::vector<std::pair<std::unique_ptr<char[]>, int64_t>>;
  return *p;
}

}  // namespace

namespace {

std::unique_ptr<char[]> pool_take(int64_t bytes, int64_t& got) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto& p = pool();
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i].second >= bytes) {
      std::unique_ptr<char[]> out = std::move(p[i].first);
      got = p[i].second;
      p.erase(p.begin() + static_cast<std::ptrdiff_t>(i));
      return out;
    }
  got = bytes;
  return std::unique_ptr<char[]>(new char[static_cast<size_t>(bytes)]);
}

void pool_give(std::unique_ptr<char[]> buffer, int64_t bytes) {
  if (!buffer) return;
  std::lock_guard<std::mutex> lock(pool_mutex);
  auto& p = pool();
  p.emplace_back(std::move(buffer), bytes);
  // A few buffers are enough for the all-reduces in flight at once.
  if (p.size() > 4)
    p.erase(
        std::min_element(p.begin(), p.end(), [](auto& a, auto& b) { return a.second < b.second; }));
}

}  // namespace

PooledScratch::PooledScratch(int64_t bytes, std::shared_ptr<AllocatorCore> memory)
    : bytes_(std::max<int64_t>(bytes, 1)), memory_(std::move(memory)) {
  if (memory_) {
    data_ = static_cast<char*>(memory_->allocate(static_cast<size_t>(bytes_), Category::kBuffers));
  } else {
    data_ = pool_take(bytes_, bytes_).release();
  }
}

PooledScratch::~PooledScratch() {
  if (!data_) return;
  if (memory_) {
    memory_->deallocate(data_, static_cast<size_t>(bytes_), Category::kBuffers);
  } else {
    pool_give(std::unique_ptr<char[]>(data_), bytes_);
  }
}

namespace {

int mod(int a, int n) {
  return ((a % n) + n) % n;
}

}  // namespace

Ring::Ring(RingKind kind, void* data, int64_t count, DType dtype, ReduceOp op, MPI_Comm comm,
           int tag, int64_t piece_bytes, std::shared_ptr<AllocatorCore> memory)
    : data_(static_cast<char*>(data)),
      count_(count),
      dtype_(dtype),
      op_(op),
      comm_(comm),
      tag_(tag),
      piece_(std::clamp<int64_t>(piece_bytes / static_cast<int64_t>(dtype_size(dtype)), 1,
                                 std::numeric_limits<int>::max())),
      memory_(std::move(memory)) {
  // reduce() adds in the element type: 16-bit floats must go through MPI's
  // user ops, which add in f32 (MpiCommunicator::use_ring).
  KIRI_CHECK(kind == RingKind::kAllGather || dtype == DType::kF32 || dtype == DType::kF64,
             "ring reduction of ", dtype_name(dtype), ": only F32 and F64");
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  const int n = size_;
  switch (kind) {
    case RingKind::kAllReduce:  // after the reduce-scatter rank r holds chunk r + 1
      first_ = 0, last_ = 2 * (n - 1), scatter_shift_ = 0, gather_shift_ = 1;
      break;
    case RingKind::kReduceScatter:  // shifted by one: rank r ends with chunk r
      first_ = 0, last_ = n - 1, scatter_shift_ = 1;
      break;
    case RingKind::kAllGather:  // rank r starts with chunk r
      first_ = n - 1, last_ = 2 * (n - 1), gather_shift_ = 0;
      break;
  }
}

Ring::~Ring() {
  if (idle() || mpi_finalized()) return;  // the scratch goes back
  // Failed midway: MPI may still write the scratch, which stays allocated.
  for (MPI_Request& r : recvs_)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  for (auto* v : {&recvs_, &sends_})
    for (MPI_Request& r : *v)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
  if (scratch_) scratch_->leak();  // on purpose
}

bool Ring::idle() const {
  auto null = [](MPI_Request r) { return r == MPI_REQUEST_NULL; };
  return std::all_of(recvs_.begin(), recvs_.end(), null) &&
         std::all_of(sends_.begin(), sends_.end(), null);
}

int Ring::start() {
  step_ = first_;
  if (size_ == 1 || count_ == 0) {
    step_ = last_;
    return MPI_SUCCESS;
  }
  return post(first_);
}

// Reduce-scatter step s < N-1: send chunk rank-s-h, receive chunk rank-s-h-1
// into scratch and reduce it (after N-1 steps this rank holds chunk rank+1-h
// reduced; h = scatter_shift_). All-gather step s: send chunk rank+g-s, receive
// chunk rank+g-1-s in place (g = gather_shift_: the chunk this rank holds whole
// at the start). A chunk is cut into the same pieces on both sides of a message.
int Ring::post(int step) {
  const int n = size_;
  const bool scatter = step < n - 1;
  const int s = scatter ? step : step - (n - 1);
  const int h = scatter_shift_, g = gather_shift_;
  const int send_chunk = scatter ? mod(rank_ - s - h, n) : mod(rank_ + g - s, n);
  const int recv_chunk = scatter ? mod(rank_ - s - h - 1, n) : mod(rank_ + g - 1 - s, n);
  const Range out = chunk_range(count_, n, send_chunk), in = chunk_range(count_, n, recv_chunk);
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype_)), piece = piece_;
  const MPI_Datatype type = mpi_type(dtype_);
  const int next = mod(rank_ + 1, n), prev = mod(rank_ - 1, n);
  recv_begin_ = in.begin;
  char* recv_base = data_ + in.begin * elem;
  if (scatter) {
    if (!scratch_)
      scratch_ = std::make_unique<PooledScratch>(chunk_range(count_, n, 0).size() * elem, memory_);
    scratch_elems_ = in.size();
    recv_base = scratch_->data();
  }
  recvs_.clear();
  sends_.clear();
  for (int64_t b = 0; b < in.size(); b += piece) {
    MPI_Request& r = recvs_.emplace_back(MPI_REQUEST_NULL);
    const int c = static_cast<int>(std::min(piece, in.size() - b));
    if (int rc = MPI_Irecv(recv_base + b * elem, c, type, prev, tag_, comm_, &r)) return rc;
  }
  for (int64_t b = 0; b < out.size(); b += piece) {
    MPI_Request& r = sends_.emplace_back(MPI_REQUEST_NULL);
    const int c = static_cast<int>(std::min(piece, out.size() - b));
    char* p = data_ + (out.begin + b) * elem;
    if (int rc = MPI_Isend(p, c, type, next, tag_, comm_, &r)) return rc;
  }
  reduced_.assign(recvs_.size(), 0);
  return MPI_SUCCESS;
}

void Ring::reduce(int64_t begin, int64_t n) const {
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype_));
  char* a = data_ + (recv_begin_ + begin) * elem;
  combine(a, scratch_->data() + begin * elem, n, dtype_, op_);
}

bool Ring::advance(int& rc, const char*& call) {
  const int last = last_;
  const int64_t piece = piece_;
  // Keeps going while steps complete: a poll that finds the peer ready
  // posts and often finishes the next step too.
  while (step_ < last) {
    const bool scatter = step_ < size_ - 1;
    bool all = true;
    for (size_t i = 0; i < recvs_.size(); ++i) {
      if (reduced_[i]) continue;
      int flag = 0;
      if ((rc = MPI_Test(&recvs_[i], &flag, MPI_STATUS_IGNORE))) return call = "MPI_Test", false;
      if (!flag) {
        all = false;
        continue;
      }
      const int64_t b = static_cast<int64_t>(i) * piece;
      if (scatter) reduce(b, std::min(piece, scratch_elems_ - b));
      reduced_[i] = 1;
    }
    int sent = 0;
    if ((rc = MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &sent,
                          MPI_STATUSES_IGNORE)))
      return call = "MPI_Testall", false;
    if (!all || !sent) return false;
    if (++step_ == last) scratch_.reset();
    if (step_ < last && (rc = post(step_))) return call = "MPI_Isend/MPI_Irecv", false;
  }
  return true;
}

PairExchange::PairExchange(const void* send, int64_t send_bytes, void* recv, int64_t recv_bytes,
                           MPI_Comm comm, int peer, int tag, int64_t piece_bytes)
    : send_(static_cast<const char*>(send)),
      recv_(static_cast<char*>(recv)),
      send_bytes_(send_bytes),
      recv_bytes_(recv_bytes),
      piece_(std::clamp<int64_t>(piece_bytes, 1, std::numeric_limits<int>::max())),
      comm_(comm),
      peer_(peer),
      tag_(tag) {}

PairExchange::~PairExchange() {
  if (idle() || mpi_finalized()) return;
  // Failed midway: MPI may still use the buffers, which the caller's work keeps (graveyard).
  for (MPI_Request& r : requests_)
    if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
}

bool PairExchange::idle() const {
  return std::all_of(requests_.begin(), requests_.end(),
                     [](MPI_Request r) { return r == MPI_REQUEST_NULL; });
}

int PairExchange::start() {
  requests_.clear();
  // Receives first: a piece that arrives finds its buffer posted (no unexpected-message copy).
  for (int64_t b = 0; b < recv_bytes_; b += piece_) {
    MPI_Request& r = requests_.emplace_back(MPI_REQUEST_NULL);
    const int c = static_cast<int>(std::min(piece_, recv_bytes_ - b));
    if (int rc = MPI_Irecv(recv_ + b, c, MPI_BYTE, peer_, tag_, comm_, &r)) return rc;
  }
  for (int64_t b = 0; b < send_bytes_; b += piece_) {
    MPI_Request& r = requests_.emplace_back(MPI_REQUEST_NULL);
    const int c = static_cast<int>(std::min(piece_, send_bytes_ - b));
    if (int rc = MPI_Isend(send_ + b, c, MPI_BYTE, peer_, tag_, comm_, &r)) return rc;
  }
  return MPI_SUCCESS;
}

bool PairExchange::advance(int& rc, const char*& call) {
  int done = 0;
  if ((rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                        MPI_STATUSES_IGNORE)))
    return call = "MPI_Testall", false;
  return done != 0;
}

}  // namespace kiri::comm::detail
