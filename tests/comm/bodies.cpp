#include "bodies.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>

namespace kiri::comm::testing {

Tensor make(int64_t n, DType dtype, Allocator& allocator) {
  return Tensor::empty({n}, dtype, Category::kBuffers, allocator);
}

void report_difference(const Tensor& t, int64_t i, double want, const std::string& what) {
  ADD_FAILURE() << what << ": element " << i << " of " << t.numel() << " is " << t.item(i)
                << ", expected " << want;
}

int64_t large_size() {
#if defined(__SANITIZE_ADDRESS__)
  return 100003;
#else
  return 1000003;
#endif
}

Groups make_groups(Communicator& world) {
  Groups g;
  const int r = world.rank();
  g.owned.push_back(world.split(r / 2, r, "row"));  // 2 x (n/2) mesh
  g.owned.push_back(world.split(r % 2, r, "column"));
  g.owned.push_back(world.split(0, r, "all"));  // n x 1 mesh
  g.owned.push_back(world.split(r, 0, "single"));
  g.all.push_back(&world);
  for (auto& c : g.owned) g.all.push_back(c.get());
  return g;
}

namespace {

std::string label(const Communicator& c, const char* op, int64_t n, DType d) {
  return str(op, " of ", n, " x ", dtype_name(d), " on ", c.name(), " (rank ", c.rank(), " of ",
             c.size(), ")");
}

// Input of group rank r: r + 1 + i % 5; these are its sum, avg and max.
auto reduced(int size, ReduceOp op, int64_t offset = 0) {
  const double n = size;
  return [=](int64_t i) {
    const double k = static_cast<double>((i + offset) % 5);
    if (op == ReduceOp::kMax) return n + k;
    const double sum = n * (n + 1) / 2 + n * k;
    return op == ReduceOp::kAvg ? sum / n : sum;
  };
}

}  // namespace

void check_all_reduce(Communicator& c, int64_t n, DType dtype, ReduceOp op) {
  Allocator a;
  Tensor t = make(n, dtype, a);
  const int r = c.rank();
  fill(t, [r](int64_t i) { return r + 1 + i % 5; });
  c.all_reduce(t, op);
  expect_values(t, reduced(c.size(), op), label(c, reduce_op_name(op), n, dtype) + " all_reduce");
}

void check_reduce_scatter(Communicator& c, int64_t total, DType dtype, ReduceOp op) {
  Allocator a;
  const Range mine = chunk_range(total, c.size(), c.rank());
  Tensor in = make(total, dtype, a), out = make(mine.size(), dtype, a);
  const int r = c.rank();
  fill(in, [r](int64_t i) { return r + 1 + i % 5; });
  c.reduce_scatter(in, out, op);
  expect_values(out, reduced(c.size(), op, mine.begin),
                label(c, reduce_op_name(op), total, dtype) + " reduce_scatter");
}

void check_all_gather(Communicator& c, int64_t total, DType dtype) {
  Allocator a;
  const int n = c.size();
  const Range mine = chunk_range(total, n, c.rank());
  Tensor in = make(mine.size(), dtype, a), out = make(total, dtype, a);
  const int r = c.rank();
  fill(in, [&](int64_t j) { return (r + 1) * 10 + (mine.begin + j) % 7; });
  fill(out, [](int64_t) { return -1; });
  c.all_gather(in, out);
  std::vector<int> owner(total);
  for (int q = 0; q < n; ++q) {
    const Range range = chunk_range(total, n, q);
    for (int64_t i = range.begin; i < range.end; ++i) owner[i] = q;
  }
  expect_values(
      out, [&](int64_t i) { return (owner[i] + 1) * 10 + i % 7; },
      label(c, "all_gather", total, dtype));
}

void check_broadcast(Communicator& c, int64_t n, DType dtype) {
  Allocator a;
  const int root = c.size() - 1;  // not 0 whenever the group has two ranks or more
  Tensor t = make(n, dtype, a);
  if (c.rank() == root)
    fill(t, [](int64_t i) { return 3 + i % 5; });
  else
    fill(t, [](int64_t) { return -1; });
  c.broadcast(t, root);
  expect_values(
      t, [](int64_t i) { return 3 + i % 5; }, label(c, "broadcast", n, dtype));
}

void check_send_recv_ring(Communicator& c, int64_t n, DType dtype) {
  Allocator a;
  const int size = c.size(), r = c.rank();
  const int next = (r + 1) % size, prev = (r + size - 1) % size;
  Tensor out = make(n, dtype, a), in = make(n, dtype, a);
  fill(out, [r](int64_t i) { return r * 10 + i % 3; });
  WorkHandle recv = c.recv_async(in, prev, 7);
  WorkHandle send = c.send_async(out, next, 7);
  send->wait();
  recv->wait();
  expect_values(
      in, [prev](int64_t i) { return prev * 10 + i % 3; }, label(c, "send/recv ring", n, dtype));
}

void collectives_small(Communicator& world) {
  Groups g = make_groups(world);
  for (Communicator* c : g.all)
    for (int64_t n : {0, 1, 7})
      for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          check_all_reduce(*c, n, d, op);
          check_reduce_scatter(*c, n, d, op);
        }
        check_all_gather(*c, n, d);
        check_broadcast(*c, n, d);
        check_send_recv_ring(*c, n, d);
        c->barrier();
      }
  check_all_gather(world, 7, DType::kI32);
  check_all_reduce(world, 7, DType::kI32, ReduceOp::kMax);
}

void f16_beyond_bf16(Communicator& world) {
  Groups g = make_groups(world);
  for (Communicator* c : g.all) {
    const int r = c->rank();
    const double n = c->size();
    for (int64_t total : {0, 7, 1001}) {
      // Every partial sum of up to 4 ranks is an integer below 2048: exact
      // in f16 whatever order MPI adds in; 301 is not a bf16 value.
      auto input = [r](int64_t i) { return 300 + r + i % 5; };
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        auto want = [n, op](int64_t i) {
          const double k = static_cast<double>(i % 5);
          if (op == ReduceOp::kMax) return 300 + n - 1 + k;
          const double sum = 300 * n + n * (n - 1) / 2 + n * k;
          return op == ReduceOp::kAvg ? sum / n : sum;
        };
        Allocator a;
        Tensor t = make(total, DType::kF16, a);
        fill(t, input);
        c->all_reduce(t, op);
        expect_values(t, want, label(*c, reduce_op_name(op), total, DType::kF16) + " all_reduce");
        const Range mine = chunk_range(total, c->size(), r);
        Tensor in = make(total, DType::kF16, a), out = make(mine.size(), DType::kF16, a);
        fill(in, input);
        c->reduce_scatter(in, out, op);
        expect_values(
            out, [&](int64_t j) { return want(mine.begin + j); },
            label(*c, reduce_op_name(op), total, DType::kF16) + " reduce_scatter");
      }
    }
    Allocator a;
    // 40000 per rank: one rank's value is finite, two ranks' sum is not.
    Tensor big = make(3, DType::kF16, a), neg = make(3, DType::kF16, a);
    fill(big, [](int64_t) { return 40000; });
    fill(neg, [r](int64_t i) { return -(r + 1) - 0.5 * static_cast<double>(i); });
    c->all_reduce(big, ReduceOp::kSum);
    c->all_reduce(neg, ReduceOp::kMax);
    const double big_sum =
        c->size() == 1 ? 40000.0 : static_cast<double>(std::numeric_limits<float>::infinity());
    expect_values(
        big, [=](int64_t) { return big_sum; }, label(*c, "sum past 65504", 3, DType::kF16));
    expect_values(
        neg, [](int64_t i) { return -1 - 0.5 * static_cast<double>(i); },
        label(*c, "negative max", 3, DType::kF16));
    c->barrier();
  }
}

void collectives_large(Communicator& world, DType d) {
  const int64_t kLarge = large_size();
  Groups g = make_groups(world);
  for (Communicator* c : g.all) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      check_all_reduce(*c, kLarge, d, op);
      check_reduce_scatter(*c, kLarge, d, op);
    }
    check_all_gather(*c, kLarge, d);
    check_broadcast(*c, kLarge, d);
    check_send_recv_ring(*c, kLarge, d);
    c->barrier();
  }
}

void async_out_of_order(Communicator& world) {
  Allocator a;
  const int n = world.size(), r = world.rank();
  Tensor sum = make(1000, DType::kF32, a), max = make(5000, DType::kBF16, a);
  Tensor gathered = make(7 * n, DType::kF64, a), part = make(7, DType::kF64, a);
  Tensor bcast = make(33, DType::kF32, a);
  fill(sum, [r](int64_t i) { return r + 1 + i % 5; });
  fill(max, [r](int64_t i) { return r + 1 + i % 5; });
  fill(part, [r](int64_t j) { return (r + 1) * 10 + (7 * r + j) % 7; });
  fill(bcast, [r](int64_t i) { return r == 0 ? 3 + i % 5 : -1; });
  std::vector<WorkHandle> works = {world.all_reduce_async(sum, ReduceOp::kSum),
                                   world.all_gather_async(part, gathered), world.barrier_async(),
                                   world.all_reduce_async(max, ReduceOp::kMax),
                                   world.broadcast_async(bcast, 0)};
  for (int i = 0; i < 3; ++i) world.progress();
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (const WorkHandle& w : works) EXPECT_TRUE(w->test());
  expect_values(sum, reduced(n, ReduceOp::kSum), "async all_reduce sum");
  expect_values(max, reduced(n, ReduceOp::kMax), "async all_reduce max");
  expect_values(
      gathered, [](int64_t i) { return (i / 7 + 1) * 10 + i % 7; }, "async all_gather");
  expect_values(
      bcast, [](int64_t i) { return 3 + i % 5; }, "async broadcast");
}

// Rank 0 blocks on one communicator while its peers wait for its transfer on
// another: waiting must advance both, or neither completes.
void progress_across_communicators(Communicator& world) {
  std::unique_ptr<Communicator> a = world.split(0, world.rank(), "a");
  std::unique_ptr<Communicator> b = world.split(0, world.rank(), "b");
  Allocator alloc;
  const int n = world.size(), r = world.rank();
  Tensor t = make(1000, DType::kF32, alloc);
  fill(t, [r](int64_t i) { return r + 1 + i % 5; });
  // The others start later, so rank 0's start cannot complete the agreement
  // (and issue its transfer) by itself.
  if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  WorkHandle w = b->all_reduce_async(t, ReduceOp::kSum);
  if (r == 0) {
    a->barrier();
    w->wait();
  } else {
    w->wait();
    a->barrier();
  }
  expect_values(t, reduced(n, ReduceOp::kSum), "all_reduce on b while waiting on a");
}

void stats_after_known_sequence(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "stats");
  Allocator a;
  const int64_t n = c->size(), r = c->rank();
  Tensor t = make(1000, DType::kF32, a), out = make(1000, DType::kF32, a);
  Tensor chunk = make(chunk_range(1000, c->size(), c->rank()).size(), DType::kF32, a);
  Tensor b = make(100, DType::kF32, a), s = make(10, DType::kF32, a), q = make(10, DType::kF32, a);
  fill(t, [](int64_t) { return 1; });
  fill(b, [](int64_t) { return 1; });
  fill(s, [](int64_t) { return 1; });
  c->reset_stats();
  c->all_reduce(t, ReduceOp::kSum);
  c->reduce_scatter(t, chunk, ReduceOp::kSum);
  c->all_gather(chunk, out);
  c->broadcast(b, 0);
  WorkHandle recv = c->recv_async(q, (r + n - 1) % n, 3);
  c->send(s, (r + 1) % n, 3);
  recv->wait();
  c->barrier();
  auto expect = [&](OpKind k, int64_t sent, int64_t received) {
    const OpStats st = c->stats(k);
    EXPECT_EQ(st.calls, 1) << op_kind_name(k);
    EXPECT_EQ(st.bytes_sent, sent) << op_kind_name(k);
    EXPECT_EQ(st.bytes_received, received) << op_kind_name(k);
    EXPECT_GE(st.wait_s, 0) << op_kind_name(k);
  };
  expect(OpKind::kAllReduce, 2 * (n - 1) * 4000 / n, 2 * (n - 1) * 4000 / n);
  expect(OpKind::kReduceScatter, (n - 1) * 4000 / n, (n - 1) * 4000 / n);
  expect(OpKind::kAllGather, (n - 1) * 4000 / n, (n - 1) * 4000 / n);
  expect(OpKind::kBroadcast, r == 0 ? 400 : 0, r == 0 ? 0 : 400);
  expect(OpKind::kSend, 40, 0);
  expect(OpKind::kRecv, 0, 40);
  expect(OpKind::kBarrier, 0, 0);
  const std::vector<OpRecord> ops = c->recent_ops();
  const std::vector<OpKind> kinds = {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather,
                                     OpKind::kBroadcast, OpKind::kRecv,          OpKind::kSend,
                                     OpKind::kBarrier};
  ASSERT_EQ(ops.size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(ops[i].kind, kinds[i]) << i;
    EXPECT_TRUE(ops[i].done) << i;
  }
  EXPECT_EQ(ops[0].seq, 1u);
  EXPECT_EQ(ops[6].seq, 5u);  // collectives count on their own: recv/send are #1 and #1
  EXPECT_EQ(ops[4].seq, 1u);
  EXPECT_EQ(ops[3].peer, 0);
  EXPECT_EQ(ops[0].bytes, 4000);
  c->reset_stats();
  EXPECT_EQ(c->stats(OpKind::kAllReduce).calls, 0);
}

void ring_keeps_last_64(Communicator& world) {
  std::unique_ptr<Communicator> c = world.split(0, world.rank(), "ring");
  for (int i = 0; i < 70; ++i) c->barrier();
  const std::vector<OpRecord> ops = c->recent_ops();
  ASSERT_EQ(ops.size(), 64u);
  EXPECT_EQ(ops.front().seq, 7u);
  EXPECT_EQ(ops.back().seq, 70u);
  EXPECT_EQ(c->stats(OpKind::kBarrier).calls, 70);
}

}  // namespace kiri::comm::testing
