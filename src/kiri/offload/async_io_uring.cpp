// The io_uring engine (liburing). A request is cut into block_size pieces, queued
// in order; at most queue_depth pieces are in the ring at a time. The caller's
// thread submits what fits when it starts a request; a completion thread reaps
// completions, continues short transfers, and refills the ring from the queue, so a
// request larger than queue_depth x block_size keeps moving while the caller
// computes (the optimizer's chunks are 20+ MiB, the ring holds 8 MiB by default).
//
// Calls from one thread (the caller's) are enough and are what is tested; read,
// write and wait lock the engine's state, so calls from several threads are safe
// but serialise. The completion thread alone touches the completion ring, the
// submission ring is touched under the lock only: liburing's rule for two threads.
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/log.h"
#include "kiri/offload/async_io.h"

namespace kiri::offload {

namespace {

// The completion that tells the completion thread to stop (no piece has this slot).
constexpr uint64_t kStopTag = ~uint64_t{0};
// One SQE moves at most this much (the length is 32-bit; Linux moves at most
// 0x7ffff000 bytes per call anyway); a longer piece continues as a short transfer.
constexpr int64_t kMaxSqeBytes = int64_t{1} << 30;

class UringIo final : public AsyncIo {
 public:
  explicit UringIo(const IoOptions& o)
      : block_(o.block_size), slots_(static_cast<size_t>(o.queue_depth)) {
    for (size_t i = slots_.size(); i-- > 0;) free_.push_back(i);
  }
  // Sets up the ring and the completion thread; false (and nothing to undo) when the
  // kernel refuses io_uring or lacks what this engine needs.
  bool start() {
    // One extra entry: the destructor's stop NOP never finds the ring full.
    const unsigned entries = static_cast<unsigned>(slots_.size()) + 1;
    const int ret = io_uring_queue_init(entries, &ring_, 0);
    if (ret < 0) {
      log::debug("offload: io_uring_queue_init(", entries, ") failed: ", std::strerror(-ret));
      return false;
    }
    // IORING_OP_READ/WRITE: Linux 5.6; EXT_ARG (5.11) lets the completion thread wait
    // with a timeout without touching the submission ring.
    if (!supported(ring_) || !(ring_.features & IORING_FEAT_EXT_ARG)) {
      log::debug("offload: this kernel's io_uring lacks IORING_OP_READ/WRITE or EXT_ARG");
      io_uring_queue_exit(&ring_);
      return false;
    }
    started_ = true;
    reaper_ = std::thread([this] { reap(); });
    return true;
  }
  ~UringIo() override {
    if (!started_) return;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // No transfer may outlive its buffer's owner: drain, then stop the reaper (at
      // once through a NOP, or at its next timeout when the ring is broken).
      done_.wait(lock, [&] { return idle() || broken_ != 0; });
      stop_ = true;
      if (broken_ == 0) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe != nullptr) {
          io_uring_prep_nop(sqe);
          io_uring_sqe_set_data64(sqe, kStopTag);
          dirty_ = true;
          flush();
        }
      }
    }
    reaper_.join();
    io_uring_queue_exit(&ring_);
  }

  Ticket read(int fd, void* buf, int64_t bytes, int64_t offset) override {
    return submit(fd, static_cast<char*>(buf), bytes, offset, false);
  }
  Ticket write(int fd, const void* buf, int64_t bytes, int64_t offset) override {
    return submit(fd, const_cast<char*>(static_cast<const char*>(buf)), bytes, offset, true);
  }

  IoResult wait(Ticket ticket) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = requests_.find(ticket);
    KIRI_CHECK(it != requests_.end(), "I/O ticket ", ticket, " is unknown or already waited for");
    // A reference, not the iterator: a request started from another thread meanwhile
    // may rehash the map, which moves iterators but not elements.
    const Request& req = it->second;
    done_.wait(lock, [&] { return req.pending == 0; });
    const IoResult r = req.result;
    requests_.erase(ticket);
    return r;
  }
  bool ready(Ticket ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = requests_.find(ticket);
    KIRI_CHECK(it != requests_.end(), "I/O ticket ", ticket, " is unknown or already waited for");
    return it->second.pending == 0;
  }
  const char* name() const override { return "io_uring"; }

 private:
  struct Piece {
    Ticket ticket = 0;  // 0: a free slot
    int fd = -1;
    char* buf = nullptr;
    int64_t bytes = 0, offset = 0;
    int64_t done = 0;  // moved so far (a short transfer continues from here)
    bool write = false;
  };
  struct Request {
    int64_t pending = 0;  // pieces not yet finished
    IoResult result;
  };

  static bool supported(io_uring& ring) {
    io_uring_probe* probe = io_uring_get_probe_ring(&ring);
    if (probe == nullptr) return false;
    const bool ok = io_uring_opcode_supported(probe, IORING_OP_READ) &&
                    io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
                    io_uring_opcode_supported(probe, IORING_OP_NOP);
    io_uring_free_probe(probe);
    return ok;
  }

  bool idle() const { return queued_.empty() && free_.size() == slots_.size(); }

  Ticket submit(int fd, char* buf, int64_t bytes, int64_t offset, bool write) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Ticket t = next_++;
    Request& r = requests_[t];
    r.result.bytes = bytes;
    for (int64_t at = 0; at < bytes; at += block_) {
      Piece p;
      p.ticket = t;
      p.fd = fd;
      p.buf = buf + at;
      p.bytes = std::min(block_, bytes - at);
      p.offset = offset + at;
      p.write = write;
      queued_.push_back(p);
      ++r.pending;
    }
    if (broken_ != 0) {
      fail_all(broken_);
      return t;
    }
    refill();
    flush();
    return t;
  }

  // Moves queued pieces, in request order, into free slots of the ring. Lock held.
  void refill() {
    while (!queued_.empty() && !free_.empty()) {
      const size_t slot = free_.back();
      free_.pop_back();
      slots_[slot] = queued_.front();
      queued_.pop_front();
      prep(slot);
    }
  }

  // An SQE for what is left of the piece in `slot`. Lock held.
  void prep(size_t slot) {
    const Piece& p = slots_[slot];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The ring has queue_depth + 1 entries and at most queue_depth pieces are out.
    KIRI_CHECK_KIND(kInternal, sqe != nullptr, "io_uring: no free submission entry");
    const auto n = static_cast<unsigned>(std::min(p.bytes - p.done, kMaxSqeBytes));
    const auto at = static_cast<uint64_t>(p.offset + p.done);
    if (p.write)
      io_uring_prep_write(sqe, p.fd, p.buf + p.done, n, at);
    else
      io_uring_prep_read(sqe, p.fd, p.buf + p.done, n, at);
    io_uring_sqe_set_data64(sqe, slot);
    dirty_ = true;
  }

  // Submits the prepared SQEs, retried while interrupted; any other refusal breaks
  // the engine: every request still out ends with that error, never a hang. Lock held.
  void flush() {
    if (!dirty_) return;
    dirty_ = false;
    int ret;
    do ret = io_uring_submit(&ring_);
    while (ret == -EINTR);
    if (ret < 0) {
      log::warn("offload: io_uring_submit failed: ", std::strerror(-ret));
      broken_ = -ret;
      fail_all(broken_);
    }
  }

  // Ends every piece queued or in the ring with `err`. Lock held.
  void fail_all(int err) {
    for (Piece& p : queued_) finish(p, err);
    queued_.clear();
    for (Piece& p : slots_)
      if (p.ticket != 0) finish(p, err);  // the slot stays taken: the ring is done
    done_.notify_all();
  }

  void finish(Piece& p, int err) {
    Request& r = requests_[p.ticket];
    if (r.result.err == 0) r.result.err = err;
    r.result.done += p.done;
    --r.pending;
    p = Piece{};
  }

  // One completion of the piece in `slot`. Lock held.
  void complete(size_t slot, int res) {
    Piece& p = slots_[slot];
    if (p.ticket == 0) return;  // failed already by fail_all
    if (res == -EINTR || res == -EAGAIN) {
      prep(slot);  // the same transfer again
      return;
    }
    if (res > 0) p.done += res;
    if (res > 0 && p.done < p.bytes) {
      prep(slot);  // a short transfer continues; end of file (0) or an error stops
      return;
    }
    finish(p, res < 0 ? -res : 0);
    free_.push_back(slot);
    done_.notify_all();
  }

  void reap() {
    for (;;) {
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec timeout{0, 100'000'000};  // only a broken ring waits for it
      const int ret = io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout);
      std::lock_guard<std::mutex> lock(mutex_);
      if (ret == -EINTR || ret == -ETIME) {
        if (stop_) return;
        continue;
      }
      if (ret < 0) {
        log::warn("offload: io_uring_wait_cqe failed: ", std::strerror(-ret));
        broken_ = -ret;
        fail_all(broken_);
        return;
      }
      bool stop = false;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kStopTag)
          stop = true;
        else
          complete(static_cast<size_t>(tag), cqe->res);
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      if (stop) return;
      refill();
      flush();
    }
  }

  io_uring ring_{};
  const int64_t block_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::deque<Piece> queued_;  // not yet in the ring, in request order
  std::vector<Piece> slots_;  // in the ring
  std::vector<size_t> free_;  // free slots
  std::unordered_map<Ticket, Request> requests_;
  Ticket next_ = 1;
  bool dirty_ = false;  // SQEs prepared, not yet submitted
  bool stop_ = false;
  bool started_ = false;
  int broken_ = 0;  // the errno that broke the ring; every later request fails with it
  std::thread reaper_;
};

}  // namespace

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions& options) {
  auto io = std::make_unique<UringIo>(options);
  if (!io->start()) return nullptr;
  return io;
}

}  // namespace kiri::offload
