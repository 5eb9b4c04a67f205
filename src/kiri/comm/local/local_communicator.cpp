// The local backend's Communicator and run_local().
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "kiri/base/log.h"
#include "kiri/comm/diagnosis.h"
#include "kiri/comm/local/local.h"
#include "kiri/comm/local/local_group.h"
#include "kiri/comm/polling_work.h"

namespace kiri::comm {
namespace detail {
namespace {

using namespace std::chrono_literals;

// What local works share: waiting on the group's condition variable, and the
// diagnosis, which reads every rank's ring directly.
class LocalWork : public PollingWork {
 public:
  LocalWork(std::shared_ptr<LocalGroup> group, GroupInfo info, std::shared_ptr<OpBook> book,
            OpKind kind, uint64_t record, std::chrono::milliseconds timeout, std::string what,
            uint64_t seq)
      : PollingWork(std::move(book), kind, record, timeout),
        group_(std::move(group)),
        info_(std::move(info)),
        what_(std::move(what)),
        seq_(seq) {}

 protected:
  void idle(Clock::time_point until) override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    // Short slices, so that an abort elsewhere is seen within milliseconds.
    const Clock::time_point limit = std::min(until, Clock::now() + 10ms);
    group_->cv.wait_until(lock, limit,
                          [&] { return group_->version != seen_ || group_->world->aborted(); });
  }
  void set_waiting(bool waiting) override {
    group_->world->set_activity(info_.world_ranks[info_.rank],
                                waiting ? str("waiting in ", what_, " on ", info_.name) : "");
  }
  void timed_out(double waited_s) override {
    if (test()) return;
    std::vector<std::shared_ptr<OpBook>> books;
    {
      std::lock_guard<std::mutex> lock(group_->mutex);
      books = group_->books;
    }
    std::vector<RankReport> reports(books.size());
    for (size_t r = 0; r < books.size(); ++r) {
      if (!books[r]) continue;
      reports[r].answered = true;
      reports[r].ring = books[r]->recent();
      reports[r].activity = group_->world->activity(info_.world_ranks[r]);
    }
    HangContext context{info_, what_, seq_, waited_s, 0, hint()};
    raise_hang(context, reports, __FILE__, __LINE__);
  }
  virtual std::string hint() { return ""; }

  std::shared_ptr<LocalGroup> group_;
  GroupInfo info_;
  std::string what_;
  uint64_t seq_;
  uint64_t seen_ = 0;  // group version at the last poll
};

class LocalCollectiveWork final : public LocalWork {
 public:
  using LocalWork::LocalWork;
  std::shared_ptr<LocalGroup> new_group;  // split results
  int new_rank = -1;

 protected:
  bool poll() override {
    std::unique_lock<std::mutex> lock(group_->mutex);
    seen_ = group_->version;
    LocalSlot& s = group_->slots.at(seq_);
    if (!s.done) {
      if (s.count < group_->size() || s.claimed) {
        group_->world->check(info_, what_);
        return false;
      }
      s.claimed = true;  // this rank computes for everyone
      lock.unlock();
      std::string error;
      try {
        error = execute_slot(info_, *group_, s);
      } catch (const std::exception& e) {
        error = e.what();
      }
      // The results are in place: drop the slot's references, so that each rank's
      // buffers go when it lets go of them, not when its slowest peer polls.
      std::fill(s.in.begin(), s.in.end(), Tensor());
      std::fill(s.out.begin(), s.out.end(), Tensor());
      lock.lock();
      s.error = error;
      s.done = true;
      group_->changed();
    }
    const std::string error = s.error;
    if (!s.new_group.empty()) {
      new_group = s.new_group[info_.rank];
      new_rank = s.new_rank[info_.rank];
    }
    if (++s.consumed == group_->size()) group_->slots.erase(seq_);
    if (!error.empty())
      KIRI_RAISE(kCommMismatch, error, " [seen by ", info_.rank_name(info_.rank), "]");
    return true;
  }
};

class LocalP2pWork final : public LocalWork {
 public:
  LocalP2pWork(std::shared_ptr<LocalP2p> op, std::shared_ptr<LocalGroup> group, GroupInfo info,
               std::shared_ptr<OpBook> book, OpKind kind, uint64_t record,
               std::chrono::milliseconds timeout, std::string what, uint64_t seq)
      : LocalWork(std::move(group), std::move(info), std::move(book), kind, record, timeout,
                  std::move(what), seq),
        op_(std::move(op)) {}

 protected:
  bool poll() override {
    std::lock_guard<std::mutex> lock(group_->mutex);
    seen_ = group_->version;
    if (!op_->done) {
      group_->world->check(info_, what_);
      return false;
    }
    if (!op_->error.empty()) KIRI_RAISE(kCommMismatch, op_->error);
    return true;
  }
  std::string hint() override {
    const bool send = kind() == OpKind::kSend;
    const int other = send ? op_->dst : op_->src;
    return str(info_.rank_name(other), " has posted no matching ", send ? "recv" : "send", " (tag ",
               op_->tag, ")");
  }

 private:
  std::shared_ptr<LocalP2p> op_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, std::string name,
                    const Options& options)
      : group_(std::move(group)), options_(options), book_(std::make_shared<OpBook>()) {
    info_ = GroupInfo{std::move(name), rank, group_->size(), group_->world_ranks};
    std::lock_guard<std::mutex> lock(group_->mutex);
    group_->books[rank] = book_;  // stays: others read this ring in diagnoses
  }

  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  std::string name() const override { return info_.name; }

  WorkHandle all_reduce_async(Tensor& t, ReduceOp op) override {
    return collective(all_reduce_signature(t, op), t, t, t.nbytes(), -1);
  }
  WorkHandle reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp op) override {
    return collective(reduce_scatter_signature(in, out, op, info_.size, info_.rank), in, out,
                      in.nbytes(), -1);
  }
  WorkHandle all_gather_async(const Tensor& in, Tensor& out) override {
    return collective(all_gather_signature(in, out, info_.size, info_.rank), in, out, out.nbytes(),
                      -1);
  }
  WorkHandle broadcast_async(Tensor& t, int root) override {
    return collective(broadcast_signature(t, root, info_.size), t, t, t.nbytes(), root);
  }
  WorkHandle barrier_async() override {
    Signature sig;
    sig.kind = static_cast<int32_t>(OpKind::kBarrier);
    return collective(sig, Tensor(), Tensor(), 0, -1);
  }
  WorkHandle send_async(const Tensor& t, int peer, int tag) override {
    return p2p(OpKind::kSend, t, peer, tag);
  }
  WorkHandle recv_async(Tensor& t, int peer, int tag) override {
    return p2p(OpKind::kRecv, t, peer, tag);
  }

  void progress() override {
    std::vector<std::weak_ptr<PollingWork>> keep;
    for (auto& weak : outstanding_) {
      auto w = weak.lock();
      if (!w) continue;
      try {
        if (!w->test()) keep.push_back(w);
      } catch (const Error&) {
        // Kept by the work: its owner's wait() raises it.
      }
    }
    outstanding_.swap(keep);
  }

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  const Options& options() const override { return options_; }
  void set_options(const Options& o) override { options_ = o; }
  OpStats stats(OpKind kind) const override { return book_->stats(kind); }
  void reset_stats() override { book_->reset_stats(); }
  std::vector<OpRecord> recent_ops() const override { return book_->recent(); }

 private:
  std::shared_ptr<LocalCollectiveWork> collective(Signature sig, const Tensor& in,
                                                  const Tensor& out, int64_t bytes, int root);
  WorkHandle p2p(OpKind kind, const Tensor& t, int peer, int tag);
  void track(const std::shared_ptr<PollingWork>& w) {
    if (outstanding_.size() > 64)  // drop the finished ones now and then
      std::erase_if(outstanding_, [](const auto& weak) {
        auto w = weak.lock();
        return !w || w->complete();
      });
    outstanding_.push_back(w);
  }

  std::shared_ptr<LocalGroup> group_;
  GroupInfo info_;
  Options options_;
  std::shared_ptr<OpBook> book_;
  std::vector<std::weak_ptr<PollingWork>> outstanding_;
};

std::shared_ptr<LocalCollectiveWork> LocalCommunicator::collective(Signature sig, const Tensor& in,
                                                                   const Tensor& out, int64_t bytes,
                                                                   int root) {
  const int64_t start_us = trace_now(tracer_);
  sig.seq = book_->next_collective_seq();
  const std::string what = describe(sig);
  group_->world->check(info_, what);
  uint64_t record = 0;
  const bool is_split = sig.kind == kSplitKind;
  const OpKind kind = is_split ? OpKind::kBarrier : static_cast<OpKind>(sig.kind);
  if (!is_split)
    record = book_->begin(kind, sig.seq, bytes, root,
                          traffic(kind, bytes, info_.size, info_.rank, root));
  {
    std::lock_guard<std::mutex> lock(group_->mutex);
    LocalSlot& s = group_->slots.try_emplace(sig.seq, info_.size).first->second;
    s.sigs[info_.rank] = sig;
    s.in[info_.rank] = in;
    s.out[info_.rank] = out;
    ++s.count;
    group_->changed();
  }
  auto w = std::make_shared<LocalCollectiveWork>(group_, info_, book_, kind, record,
                                                 options_.timeout, what, sig.seq);
  if (tracer_)
    w->trace(tracer_, start_us, is_split ? "split" : op_kind_name(kind),
             trace_args(bytes, info_.name, sig.seq, root >= 0 ? "root" : nullptr, root));
  track(w);
  return w;
}

WorkHandle LocalCommunicator::p2p(OpKind kind, const Tensor& t, int peer, int tag) {
  const int64_t start_us = trace_now(tracer_);
  check_tensor(t, op_kind_name(kind));
  check_peer(peer, tag, info_.size, 1 << 30);
  const uint64_t seq = book_->next_p2p_seq();
  const bool send = kind == OpKind::kSend;
  const std::string what =
      str(op_kind_name(kind), " #", seq, " (", t.numel(), " x ", dtype_name(t.dtype()),
          send ? " to " : " from ", info_.rank_name(peer), ", tag ", tag, ")");
  group_->world->check(info_, what);
  const uint64_t record =
      book_->begin(kind, seq, t.nbytes(), peer, traffic(kind, t.nbytes(), info_.size, 0, 0));
  auto op = std::make_shared<LocalP2p>();
  op->src = send ? info_.rank : peer;
  op->dst = send ? peer : info_.rank;
  op->tag = tag;
  op->t = t;
  {
    std::lock_guard<std::mutex> lock(group_->mutex);
    const auto key = std::make_tuple(op->src, op->dst, tag);
    auto& mine = send ? group_->sends[key] : group_->recvs[key];
    auto& theirs = send ? group_->recvs[key] : group_->sends[key];
    if (theirs.empty()) {
      mine.push_back(op);
    } else {  // the partner is waiting: copy now (FIFO per key, like MPI)
      auto other = theirs.front();
      theirs.pop_front();
      match_p2p(send ? *op : *other, send ? *other : *op, info_);
      group_->changed();
    }
  }
  auto w = std::make_shared<LocalP2pWork>(op, group_, info_, book_, kind, record, options_.timeout,
                                          what, 0);
  if (tracer_)
    w->trace(tracer_, start_us, op_kind_name(kind),
             trace_args(static_cast<int64_t>(t.nbytes()), info_.name, seq, "peer", peer));
  track(w);
  return w;
}

std::unique_ptr<Communicator> LocalCommunicator::split(int color, int key,
                                                       const std::string& name) {
  Signature sig;
  sig.kind = kSplitKind;
  sig.color = color < 0 ? -1 : color;
  sig.key = key;
  auto w = collective(sig, Tensor(), Tensor(), 0, -1);
  w->wait();
  if (!w->new_group) return nullptr;
  auto sub = std::make_unique<LocalCommunicator>(w->new_group, w->new_rank, name, options_);
  sub->set_tracer(tracer_);
  return sub;
}

// Rethrows a rank's exception; kiri errors get the rank in front of their message.
void rethrow_with_rank(const std::exception_ptr& e, int rank, int size) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    const std::string& where = err.where();  // "file.cpp:123"
    const size_t colon = where.rfind(':');
    const std::string file = where.substr(0, colon);
    const int line = colon == std::string::npos ? 0 : std::atoi(where.c_str() + colon + 1);
    throw Error(err.kind(), str("rank ", rank, " of ", size, ": ", err.message()), file.c_str(),
                line);
  }
}

}  // namespace
}  // namespace detail

void run_local(int world_size, const std::function<void(Communicator& world)>& body,
               Options options) {
  using namespace detail;
  KIRI_CHECK(world_size >= 1, "run_local needs at least one rank, got ", world_size);
  auto world = std::make_shared<LocalWorld>(world_size);
  std::vector<int> ranks(world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = std::make_shared<LocalGroup>(world, ranks);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      log::set_rank(r);
      try {
        LocalCommunicator comm(group, r, "world", options);
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        world->abort(r, e.what());
      } catch (...) {
        errors[r] = std::current_exception();
        world->abort(r, "an exception that is not a std::exception");
      }
      world->set_activity(r, "returned from its body");
      log::set_rank(-1);
    });
  for (std::thread& t : threads) t.join();
  const int failed = world->failed_rank();
  if (failed >= 0) rethrow_with_rank(errors[failed], failed, world_size);
}

}  // namespace kiri::comm
