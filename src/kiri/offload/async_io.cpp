#include "kiri/offload/async_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::offload {

namespace {

// pread/pwrite on queue_depth threads: each piece is one blocking call on a
// worker, so queue_depth pieces are in flight.
class ThreadsIo final : public AsyncIo {
 public:
  explicit ThreadsIo(const IoOptions& o) : block_(o.block_size) {
    for (int i = 0; i < o.queue_depth; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadsIo() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    more_.notify_all();
    for (std::thread& t : workers_) t.join();
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
  const char* name() const override { return "threads"; }

 private:
  struct Piece {
    Ticket ticket;
    int fd;
    char* buf;
    int64_t bytes, offset;
    bool write;
  };
  struct Request {
    int64_t pending = 0;
    IoResult result;
  };

  Ticket submit(int fd, char* buf, int64_t bytes, int64_t offset, bool write) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Ticket t = next_++;
    Request& r = requests_[t];
    r.result.bytes = bytes;
    for (int64_t at = 0; at < bytes; at += block_) {
      queue_.push_back({t, fd, buf + at, std::min(block_, bytes - at), offset + at, write});
      ++r.pending;
    }
    more_.notify_all();
    return t;
  }

  void work() {
    for (;;) {
      Piece p;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        more_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        p = queue_.front();
        queue_.pop_front();
      }
      int err = 0;
      int64_t done = 0;
      while (done < p.bytes) {  // a short transfer continues; EOF or an error stops
        const ssize_t n = p.write ? ::pwrite(p.fd, p.buf + done, p.bytes - done, p.offset + done)
                                  : ::pread(p.fd, p.buf + done, p.bytes - done, p.offset + done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) err = errno;
        if (n <= 0) break;
        done += n;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      Request& r = requests_[p.ticket];
      if (r.result.err == 0) r.result.err = err;
      r.result.done += done;
      if (--r.pending == 0) done_.notify_all();
    }
  }

  const int64_t block_;
  std::mutex mutex_;
  std::condition_variable more_, done_;
  std::deque<Piece> queue_;
  std::unordered_map<Ticket, Request> requests_;
  Ticket next_ = 1;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<AsyncIo> make_io_uring(const IoOptions& options);  // async_io_uring.cpp

std::unique_ptr<AsyncIo> make_async_io(const IoOptions& options) {
  // The schema's bounds (config_schema.cpp), checked again for callers that bypass it: a
  // queue_depth of 10^5 would be that many threads, or a ring the kernel refuses.
  KIRI_CHECK_KIND(kConfig, options.queue_depth >= 1 && options.queue_depth <= 1024,
                  "offload.queue_depth must be in [1, 1024], got ", options.queue_depth);
  KIRI_CHECK_KIND(kConfig,
                  options.block_size >= 4096 && options.block_size % 4096 == 0 &&
                      options.block_size <= (int64_t{1} << 30),
                  "offload.block_size must be a multiple of 4 KiB up to 1 GiB, got ",
                  options.block_size);
  // auto is the thread pool, by measurement (benchmarks/offload_io.sh, docs/performance.md):
  // at the default queue depth 8 and 1 MiB blocks, io_uring over the pool on this
  // machine's disk was 0.88x on writes and 0.90x on reads idle, 0.84x and 0.99x with
  // every core busy (geometric means of 5 runs; single runs 0.66-1.37x), at CPU per GB
  // of the same order. Its one completion thread issues every piece, so when that thread
  // waits for a core the queue drains; the pool's threads wait independently, and the
  // pool needs nothing a seccomp profile may forbid. io_uring stays a choice.
  if (options.engine != IoEngine::kIoUring) return std::make_unique<ThreadsIo>(options);
  auto ring = make_io_uring(options);  // nullptr: the kernel refuses io_uring
  KIRI_CHECK_KIND(kConfig, ring != nullptr,
                  "offload.engine = io_uring, but this kernel refuses io_uring (a container's "
                  "seccomp profile may block it): use offload.engine = threads or auto");
  return ring;
}

}  // namespace kiri::offload
