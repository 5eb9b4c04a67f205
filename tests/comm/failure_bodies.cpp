// Bodies where ranks misbehave on purpose: every rank must get a named
// error, in seconds, and the communicator must stay usable where it can.
#include <gtest/gtest.h>

#include <thread>

#include "bodies.h"
#include "kiri/base/log.h"
#include "kiri/base/timer.h"

namespace kiri::comm::testing {
namespace {

// Runs f, expects a kiri error of `kind`, returns its message.
template <typename F>
std::string expect_error(ErrorKind kind, F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no error of kind " << error_kind_name(kind);
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

void shape_mismatch(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "shapes");
  Allocator a;
  Tensor t = make(c->rank() == 0 ? 10 : 11, DType::kF32, a);
  fill(t, [](int64_t) { return 1; });
  const std::string m =
      expect_error(ErrorKind::kCommMismatch, [&] { c->all_reduce(t, ReduceOp::kSum); });
  EXPECT_TRUE(contains(m, "collective #1 on shapes")) << m;
  EXPECT_TRUE(contains(m, "10 x F32") && contains(m, "11 x F32")) << m;
  if (c->size() == 2)
    EXPECT_TRUE(contains(m, "rank 0 called") && contains(m, "rank 1 called")) << m;
  else
    EXPECT_TRUE(contains(m, "first divergent rank: rank 0.")) << m;
  // Nothing reached the tensors (a transfer of kiri's may have started: its result waits for
  // the agreement), so the communicator still works.
  Tensor u = make(5, DType::kF32, a);
  fill(u, [](int64_t) { return 1; });
  c->all_reduce(u, ReduceOp::kSum);
  expect_values(
      u, [&](int64_t) { return c->size(); }, "all_reduce after a mismatch");
}

void skipped_collective(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "skip");
  Allocator a;
  const int skipper = c->size() == 2 ? 1 : 2;
  Tensor t = make(10, DType::kF32, a), b = make(5, DType::kF32, a);
  fill(t, [](int64_t) { return 1; });
  fill(b, [](int64_t) { return 1; });
  c->barrier();
  const std::string m = expect_error(ErrorKind::kCommMismatch, [&] {
    if (c->rank() != skipper) c->all_reduce(t, ReduceOp::kSum);  // #2
    c->broadcast(b, 0);                                          // the skipper's #2
  });
  EXPECT_TRUE(contains(m, "collective #2 on skip")) << m;
  EXPECT_TRUE(contains(m, "broadcast #2 (5 x F32, root 0)")) << m;
  EXPECT_TRUE(contains(m, "all_reduce #2 (10 x F32, sum)")) << m;
  if (c->size() == 2)
    EXPECT_TRUE(contains(m, "rank 1 called broadcast")) << m;
  else
    EXPECT_TRUE(contains(m, "first divergent rank: rank 2.")) << m;
  if (c->rank() == 0) log::info("example mismatch message: ", m);
}

void late_rank_times_out(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "late");
  Options o = c->options();
  o.timeout = std::chrono::seconds(1);
  o.diagnosis_grace = std::chrono::milliseconds(300);
  c->set_options(o);
  Allocator a;
  Tensor t = make(1000, DType::kF32, a);
  const int late = c->size() - 1, r = c->rank();
  fill(t, [r](int64_t i) { return r + 1 + i % 5; });
  c->barrier();
  if (r == late) {
    // Outside communication past the others' timeout and grace (1.3 s), then
    // arrives within their second wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(1800));
    c->all_reduce(t, ReduceOp::kSum);
  } else {
    WorkHandle w = c->all_reduce_async(t, ReduceOp::kSum);
    Timer timer;
    const std::string m = expect_error(ErrorKind::kCommTimeout, [&] { w->wait(); });
    EXPECT_GE(timer.seconds(), 0.99);
    EXPECT_LT(timer.seconds(), 1.9) << "the timeout and the grace are 1 s and 0.3 s";
    const std::string who = str("rank ", late);
    EXPECT_TRUE(contains(m, "all_reduce #2 (1000 x F32, sum) on late")) << m;
    EXPECT_TRUE(contains(m, "Likely cause: " + who)) << m;
    EXPECT_TRUE(contains(m, "missing: dead, or stuck outside communication") ||
                contains(m, "not inside any communication call"))
        << m;
    EXPECT_TRUE(contains(m, "#1 barrier done")) << m;
    if (r == 0) log::info("example timeout message: ", m);
    w->wait();  // still outstanding: completes once the late rank arrives
  }
  const int n = c->size();
  expect_values(
      t, [n](int64_t i) { return n * (n + 1) / 2 + n * (i % 5); }, "late all_reduce");
}

void recv_timeout_names_the_peer(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "p2p_late");
  Options o = c->options();
  o.timeout = std::chrono::milliseconds(c->rank() == 0 ? 500 : 5000);
  o.diagnosis_grace = std::chrono::milliseconds(300);
  c->set_options(o);
  Allocator a;
  Tensor t = make(10, DType::kF32, a);
  fill(t, [](int64_t) { return 7; });
  if (c->rank() == 0) {
    Tensor in = make(10, DType::kF32, a);
    WorkHandle w = c->recv_async(in, 1, 9);
    const std::string m = expect_error(ErrorKind::kCommTimeout, [&] { w->wait(); });
    EXPECT_TRUE(contains(m, "recv #1 (10 x F32 from rank 1, tag 9)")) << m;
    EXPECT_TRUE(contains(m, "Likely cause: rank 1 has")) << m;
    EXPECT_TRUE(contains(m, "rank 1: waiting in barrier #1 on p2p_late")) << m;
    c->barrier();
    w->wait();  // rank 1 sends after the barrier
    expect_values(
        in, [](int64_t) { return 7; }, "late recv");
  } else {
    c->barrier();
    if (c->rank() == 1) c->send(t, 0, 9);
  }
}

void recv_size_mismatch(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "p2p");
  Allocator a;
  if (c->rank() == 0) {
    Tensor s = make(10, DType::kF32, a);
    fill(s, [](int64_t) { return 1; });
    try {
      c->send(s, 1, 5);  // MPI completes the send; the local backend fails both sides
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kCommMismatch) << e.what();
    }
  } else if (c->rank() == 1) {
    Tensor t = make(12, DType::kF32, a);
    const std::string m = expect_error(ErrorKind::kCommMismatch, [&] { c->recv(t, 0, 5); });
    EXPECT_TRUE(contains(m, "12") && contains(m, "10")) << m;
  }
  c->barrier();
}

}  // namespace kiri::comm::testing
