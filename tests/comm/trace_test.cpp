// Communicators with a Tracer: one span per operation on the comm lane, as
// threads here and under mpirun (kiri_comm_tests_mpi2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bodies.h"
#include "harness.h"
#include "kiri/base/trace.h"
#include "kiri/comm/self.h"

namespace kiri::comm::testing {
namespace {

using json = nlohmann::json;

// The spans ("X" events) of a tracer, in recorded order.
std::vector<json> spans_of(const Tracer& t) {
  const json trace = json::parse(t.json());
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}

void all_reduce_spans(Communicator& c) {
  Tracer tracer(c.rank());
  c.set_tracer(&tracer);
  Allocator a;
  // Small, medium and one of 1 MiB (the MPI backend's own ring).
  const std::vector<int64_t> sizes = {10, 1000, int64_t{1} << 18};
  const int64_t from = tracer.now_us();
  for (const int64_t n : sizes) {
    Tensor t = make(n, DType::kF32, a);
    fill(t, [](int64_t i) { return static_cast<double>(i % 3); });
    c.all_reduce(t, ReduceOp::kSum);
  }
  // Asynchronous: started, then completed through progress() and wait().
  Tensor t = make(100, DType::kF32, a);
  fill(t, [](int64_t) { return 1.0; });
  WorkHandle w = c.all_reduce_async(t, ReduceOp::kSum);
  c.progress();
  w->wait();
  w->wait();  // seen complete twice, recorded once
  EXPECT_TRUE(w->test());
  const int64_t to = tracer.now_us();
  c.set_tracer(nullptr);
  c.all_reduce(t, ReduceOp::kSum);  // not traced

  const std::vector<json> spans = spans_of(tracer);
  ASSERT_EQ(spans.size(), sizes.size() + 1) << tracer.json();
  uint64_t seq = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const json& s = spans[i];
    const int64_t n = i < sizes.size() ? sizes[i] : 100;
    EXPECT_EQ(s.at("name"), "all_reduce");
    EXPECT_EQ(s.at("cat"), "comm");
    EXPECT_EQ(s.at("pid"), c.rank());
    EXPECT_EQ(s.at("tid"), static_cast<int>(Tracer::Lane::kComm));
    EXPECT_EQ(s.at("args").at("bytes"), n * 4);
    EXPECT_EQ(s.at("args").at("group"), c.name());
    const uint64_t this_seq = s.at("args").at("seq");
    if (i > 0) {
      EXPECT_EQ(this_seq, seq + 1);
    }
    seq = this_seq;
    EXPECT_GE(s.at("ts").get<int64_t>(), from);
    EXPECT_LE(s.at("ts").get<int64_t>() + s.at("dur").get<int64_t>(), to);
  }
  const Tracer::BusyStats b = tracer.busy(from, to);
  EXPECT_DOUBLE_EQ(b.compute_us, 0);
  EXPECT_GT(b.comm_us, 0);
  EXPECT_DOUBLE_EQ(b.compute_us + b.comm_us + b.idle_us, b.span_us);
}

void split_p2p_spans(Communicator& c) {
  Tracer tracer(c.rank());
  c.set_tracer(&tracer);
  std::unique_ptr<Communicator> dp = c.split(0, c.rank(), "dp");
  ASSERT_TRUE(dp);
  EXPECT_EQ(dp->tracer(), &tracer);
  Allocator a;
  Tensor t = make(8, DType::kF32, a);
  fill(t, [](int64_t i) { return static_cast<double>(i); });
  dp->broadcast(t, 1);
  if (dp->rank() == 0)
    dp->send(t, 1, 7);
  else
    dp->recv(t, 0, 7);
  dp->barrier();
  dp.reset();
  c.set_tracer(nullptr);

  const std::vector<json> spans = spans_of(tracer);
  ASSERT_EQ(spans.size(), 4u) << tracer.json();
  EXPECT_EQ(spans[0].at("name"), "split");
  EXPECT_EQ(spans[0].at("args").at("group"), c.name());
  EXPECT_EQ(spans[1].at("name"), "broadcast");
  EXPECT_EQ(spans[1].at("args").at("group"), "dp");
  EXPECT_EQ(spans[1].at("args").at("root"), 1);
  EXPECT_EQ(spans[1].at("args").at("bytes"), 32);
  EXPECT_EQ(spans[2].at("name"), c.rank() == 0 ? "send" : "recv");
  EXPECT_EQ(spans[2].at("args").at("peer"), 1 - c.rank());
  EXPECT_EQ(spans[2].at("args").at("seq"), 1);
  EXPECT_EQ(spans[3].at("name"), "barrier");
  EXPECT_EQ(spans[3].at("args").at("bytes"), 0);
  for (const json& s : spans) EXPECT_EQ(s.at("tid"), static_cast<int>(Tracer::Lane::kComm));
}

TEST(TracedComm, AllReduceRecordsOneSpanPerCallOnEachRank) {
  KIRI_RUN_RANKS(2, all_reduce_spans);
}

TEST(TracedComm, SplitInheritsTheTracerAndP2pNamesThePeer) {
  KIRI_RUN_RANKS(2, split_p2p_spans);
}

TEST(TracedComm, SelfCommunicatorRecordsEveryCollective) {
  Tracer tracer(0);
  auto world = self_communicator("world");
  world->set_tracer(&tracer);
  auto dp = world->split(0, 0, "dp");
  EXPECT_EQ(dp->tracer(), &tracer);
  Allocator a;
  Tensor t = make(16, DType::kF32, a), out = make(16, DType::kF32, a);
  fill(t, [](int64_t i) { return static_cast<double>(i); });
  dp->all_reduce(t, ReduceOp::kSum);
  dp->reduce_scatter(t, out, ReduceOp::kSum);
  dp->all_gather(t, out);
  dp->broadcast(t, 0);
  dp->barrier();
  const std::vector<json> spans = spans_of(tracer);
  ASSERT_EQ(spans.size(), 5u) << tracer.json();
  const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(spans[i].at("name"), names[i]);
    EXPECT_EQ(spans[i].at("args").at("group"), "dp");
    EXPECT_EQ(spans[i].at("args").at("bytes"), i < 4 ? 64 : 0);
    EXPECT_EQ(spans[i].at("tid"), 1);
  }
  EXPECT_EQ(spans[3].at("args").at("root"), 0);
}

TEST(TracedComm, NoTracerByDefault) {
  auto world = self_communicator("world");
  EXPECT_EQ(world->tracer(), nullptr);
  EXPECT_EQ(world->split(0, 0, "dp")->tracer(), nullptr);
}

}  // namespace
}  // namespace kiri::comm::testing
