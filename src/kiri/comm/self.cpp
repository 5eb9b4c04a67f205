#include "kiri/comm/self.h"

#include <array>
#include <deque>

#include "kiri/comm/op_book.h"

namespace kiri::comm {

namespace {

class DoneWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class SelfCommunicator : public Communicator {
 public:
  SelfCommunicator(std::string name, Options o) : name_(std::move(name)), options_(o) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

  WorkHandle all_reduce_async(Tensor& t, ReduceOp) override {
    return record(OpKind::kAllReduce, t.nbytes(), -1, detail::trace_now(tracer_));
  }
  WorkHandle reduce_scatter_async(const Tensor& in, Tensor& out, ReduceOp) override {
    const int64_t start_us = detail::trace_now(tracer_);
    KIRI_CHECK(in.numel() == out.numel(), "reduce_scatter on ", name_, " of 1 rank: input ",
               in.numel(), " and output ", out.numel(), " elements differ");
    out.copy_from(in);
    return record(OpKind::kReduceScatter, in.nbytes(), -1, start_us);
  }
  WorkHandle all_gather_async(const Tensor& in, Tensor& out) override {
    const int64_t start_us = detail::trace_now(tracer_);
    KIRI_CHECK(in.numel() == out.numel(), "all_gather on ", name_, " of 1 rank: input ", in.numel(),
               " and output ", out.numel(), " elements differ");
    out.copy_from(in);
    return record(OpKind::kAllGather, in.nbytes(), -1, start_us);
  }
  WorkHandle broadcast_async(Tensor& t, int root) override {
    const int64_t start_us = detail::trace_now(tracer_);
    KIRI_CHECK(root == 0, "broadcast on ", name_, " of 1 rank from root ", root);
    return record(OpKind::kBroadcast, t.nbytes(), root, start_us);
  }
  WorkHandle send_async(const Tensor&, int peer, int) override {
    KIRI_RAISE(kInvalidArgument, "send to rank ", peer, " on ", name_, ", a group of 1 rank");
  }
  WorkHandle recv_async(Tensor&, int peer, int) override {
    KIRI_RAISE(kInvalidArgument, "recv from rank ", peer, " on ", name_, ", a group of 1 rank");
  }
  WorkHandle barrier_async() override {
    return record(OpKind::kBarrier, 0, -1, detail::trace_now(tracer_));
  }
  void progress() override {}
  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    auto sub = std::make_unique<SelfCommunicator>(name, options_);
    sub->set_tracer(tracer_);
    return sub;
  }
  const Options& options() const override { return options_; }
  void set_options(const Options& o) override { options_ = o; }
  OpStats stats(OpKind kind) const override { return stats_[static_cast<int>(kind)]; }
  void reset_stats() override { stats_ = {}; }
  std::vector<OpRecord> recent_ops() const override { return {ring_.begin(), ring_.end()}; }

 private:
  // Nothing moves between ranks: calls are counted, bytes are not. Done at
  // once: the trace span ends here.
  WorkHandle record(OpKind kind, size_t bytes, int peer, int64_t start_us) {
    ++stats_[static_cast<int>(kind)].calls;
    const uint64_t seq = seq_++;
    ring_.push_back({seq, kind, static_cast<int64_t>(bytes), peer, true});
    if (ring_.size() > 64) ring_.pop_front();
    if (tracer_)
      tracer_->complete(op_kind_name(kind), "comm", start_us, tracer_->now_us() - start_us,
                        detail::trace_args(static_cast<int64_t>(bytes), name_, seq,
                                           peer >= 0 ? "root" : nullptr, peer),
                        Tracer::Lane::kComm);
    return std::make_shared<DoneWork>();
  }

  std::string name_;
  Options options_;
  std::array<OpStats, kNumOpKinds> stats_{};
  std::deque<OpRecord> ring_;
  uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> self_communicator(const std::string& name, Options options) {
  return std::make_unique<SelfCommunicator>(name, options);
}

}  // namespace kiri::comm
