// The MPI backend's ring all-reduce (comm/mpi/mpi_ring.h), run with options
// that send every F32/F64 all_reduce through it in small pieces (and BF16/F16
// past it); the local backend ignores them, so the same bodies also check the
// threads.
#include <gtest/gtest.h>

#include <cstring>

#include "bodies.h"
#include "harness.h"

namespace kiri::comm::testing {

Options ring_options(int64_t piece_bytes) {
  Options o = test_options();
  o.ring_all_reduce_bytes = 0;
  o.ring_piece_bytes = piece_bytes;
  return o;
}

// Sizes no group size divides, smaller than the group, 0, and large. BF16
// and F16 under the same options must not take the ring (it adds in the
// element type), so they check that they still reduce in f32.
void ring_all_reduce_sizes(Communicator& world) {
  Groups g = make_groups(world);
  for (Communicator* c : g.all)
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5}, int64_t{1001}, large_size()})
      for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax})
          check_all_reduce(*c, n, d, op);
}

// Values whose sum depends on the order of the additions: every rank must
// still hold the same bits (each chunk is reduced once, then copied).
void ring_bitwise_same_everywhere(Communicator& world) {
  Allocator a;
  const int64_t n = 100003;
  const int r = world.rank();
  Tensor t = make(n, DType::kF32, a), root = make(n, DType::kF32, a);
  fill(t, [r](int64_t i) { return 0.1 * (r + 1) + 1e-7 * static_cast<double>(i % 977) / 3.0; });
  world.all_reduce(t, ReduceOp::kSum);
  std::memcpy(root.raw(), t.raw(), t.nbytes());
  world.broadcast(root, 0);
  EXPECT_EQ(std::memcmp(root.raw(), t.raw(), t.nbytes()), 0) << "rank " << r;
}

// Several ring all-reduces in flight at once, waited in reverse: their
// messages must not match each other's.
void ring_many_in_flight(Communicator& world) {
  Allocator a;
  const int r = world.rank();
  std::vector<Tensor> ts;
  std::vector<WorkHandle> works;
  for (int k = 0; k < 6; ++k) {
    ts.push_back(make(1000 + 37 * k, k % 2 ? DType::kF64 : DType::kF32, a));
    fill(ts.back(), [r](int64_t i) { return r + 1 + i % 5; });
    works.push_back(world.all_reduce_async(ts.back(), k % 3 ? ReduceOp::kSum : ReduceOp::kMax));
  }
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (int k = 0; k < 6; ++k) {
    const double s = world.size();
    if (k % 3)
      expect_values(
          ts[k], [s](int64_t i) { return s * (s + 1) / 2 + s * (i % 5); }, "ring sum in flight");
    else
      expect_values(
          ts[k], [s](int64_t i) { return s + i % 5; }, "ring max in flight");
  }
}

// Every group counts as crossing hosts: a pair exchanges in pieces (comm/mpi/mpi_ring.h,
// PairExchange), a larger group reduce-scatters and all-gathers over kiri's ring, as groups
// across hosts do (docs/comm.md, "Two ranks on two hosts", "Groups across hosts").
Options pair_options(int64_t piece_bytes) {
  Options o = test_options();
  o.across_hosts = Options::AcrossHosts::kAlways;
  o.pair_piece_bytes = piece_bytes;
  o.ring_all_reduce_bytes = 0;
  o.ring_piece_bytes = piece_bytes;
  return o;
}

// all_reduce, reduce_scatter and all_gather at sizes around the pieces (and BF16/F16, which
// reduce through MPI's user ops, past them), then in place: reduce_scatter into this rank's
// chunk of its input, all_gather from this rank's chunk of its output.
void pair_collectives(Communicator& world) {
  Groups g = make_groups(world);
  for (Communicator* c : g.all) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{129}, int64_t{1001}})
      for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          check_all_reduce(*c, n, d, op);
          check_reduce_scatter(*c, n, d, op);
        }
        check_all_gather(*c, n, d);
      }
    Allocator a;
    const int64_t total = 1001;
    const int r = c->rank(), n = c->size();
    const Range mine = chunk_range(total, n, r);
    Tensor t = make(total, DType::kF32, a);
    fill(t, [r](int64_t i) { return r + 1 + i % 5; });
    Tensor chunk = t.flat_range(mine.begin, mine.size());
    c->reduce_scatter(t, chunk, ReduceOp::kSum);
    const double s = n;
    expect_values(
        chunk, [&](int64_t j) { return s * (s + 1) / 2 + s * ((mine.begin + j) % 5); },
        "in-place reduce_scatter");
    fill(t, [](int64_t) { return -1; });
    fill(chunk, [r, &mine](int64_t j) { return (r + 1) * 10 + (mine.begin + j) % 7; });
    c->all_gather(chunk, t);
    expect_values(
        t,
        [&](int64_t i) {
          int q = 0;
          while (i >= chunk_range(total, n, q).end) ++q;
          return (q + 1) * 10 + i % 7;
        },
        "in-place all_gather");
  }
}

// Options::scratch_memory: kiri's own transfers take their scratch from the rank's allocator,
// category buffers, and give it back. Under MPI with every group across hosts (pair_options):
// a pair's reduce_scatter receives the peer's half of this rank's chunk into scratch, a larger
// group's reduce_scatter reduces a copy of its input over the ring, an all_reduce's ring (or a
// pair's 16-bit exchange) holds an incoming chunk. The thread backend takes no scratch.
void transfer_scratch_counts_as_buffers(Communicator& world) {
  Allocator data, scratch;
  const Options before = world.options();
  Options o = before;
  o.scratch_memory = scratch.core();
  world.set_options(o);
  const int64_t total = 4096;
  const int r = world.rank(), n = world.size();
  const Range mine = chunk_range(total, n, r);
  Tensor t = make(total, DType::kF32, data);
  fill(t, [r](int64_t i) { return r + 1 + i % 3; });
  Tensor chunk = make(mine.size(), DType::kF32, data);
  world.reduce_scatter(t, chunk, ReduceOp::kSum);
  const double s = n;
  expect_values(
      chunk, [&](int64_t j) { return s * (s + 1) / 2 + s * ((mine.begin + j) % 3); },
      "reduce_scatter with counted scratch");
  const int b = static_cast<int>(Category::kBuffers);
  MemoryStats st = scratch.stats();
  if (mpi_mode()) {
    const int64_t least = n == 2 ? static_cast<int64_t>(chunk.nbytes()) : total * 4;
    EXPECT_GE(st.peak[b], least) << "reduce_scatter's scratch on " << n << " ranks";
  } else {
    EXPECT_EQ(st.peak[b], 0);
  }
  EXPECT_EQ(st.current[b], 0) << "the scratch went back";
  scratch.reset_peaks();
  world.all_reduce(t, ReduceOp::kSum);
  st = scratch.stats();
  if (mpi_mode()) {
    EXPECT_GE(st.peak[b], static_cast<int64_t>(chunk_range(total, n, 0).size() * 4));
  }
  EXPECT_EQ(st.current[b], 0);
  world.set_options(before);
}

}  // namespace kiri::comm::testing
