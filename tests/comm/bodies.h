#pragma once
// Test bodies, written once against Communicator&: they run as threads
// (local backend) and under mpirun (MPI backend). Inputs are functions of
// the rank and the element index, so every expected value is closed-form.
#include <memory>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/tensor/tensor.h"

namespace kiri::comm::testing {

Tensor make(int64_t n, DType dtype, Allocator& allocator);

// t[i] = f(i), converted to t's dtype.
template <typename F>
void fill(Tensor& t, F f) {
  const int64_t n = t.numel();
  void* p = t.raw();
  switch (t.dtype()) {
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(p)[i] = static_cast<float>(f(i));
      break;
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) static_cast<double*>(p)[i] = f(i);
      break;
    case DType::kI32:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(p)[i] = static_cast<int32_t>(f(i));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i)
        static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(f(i)));
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i)
        static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(f(i)));
      break;
    default:
      KIRI_RAISE(kInternal, "fill of ", dtype_name(t.dtype()));
  }
}

// The index of the first element that differs from f(i), or -1.
template <typename F>
int64_t first_difference(const Tensor& t, F f) {
  const int64_t n = t.numel();
  const void* p = t.raw();
  for (int64_t i = 0; i < n; ++i) {
    double v;
    switch (t.dtype()) {
      case DType::kF32:
        v = static_cast<const float*>(p)[i];
        break;
      case DType::kF64:
        v = static_cast<const double*>(p)[i];
        break;
      case DType::kI32:
        v = static_cast<const int32_t*>(p)[i];
        break;
      case DType::kBF16:
        v = bf16_to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      case DType::kF16:
        v = half_to_float(static_cast<const uint16_t*>(p)[i]);
        break;
      default:
        KIRI_RAISE(kInternal, "first_difference of ", dtype_name(t.dtype()));
    }
    if (v != static_cast<double>(f(i))) return i;
  }
  return -1;
}

void report_difference(const Tensor& t, int64_t i, double want, const std::string& what);

// Expects t[i] == f(i) for every i; reports the first difference only.
template <typename F>
void expect_values(const Tensor& t, F f, const std::string& what) {
  const int64_t i = first_difference(t, f);
  if (i >= 0) report_difference(t, i, static_cast<double>(f(i)), what);
}

// 1000003 (prime: no group size divides it); smaller under the sanitizers,
// where every element costs ~50x more.
int64_t large_size();

// The world and the sub-groups of a 2 x (n/2) and an n x 1 mesh, split by color.
struct Groups {
  std::vector<std::unique_ptr<Communicator>> owned;
  std::vector<Communicator*> all;  // world, rows, columns, all-in-one, singletons
};
Groups make_groups(Communicator& world);

void check_all_reduce(Communicator& c, int64_t n, DType dtype, ReduceOp op);
void check_reduce_scatter(Communicator& c, int64_t total, DType dtype, ReduceOp op);
void check_all_gather(Communicator& c, int64_t total, DType dtype);
void check_broadcast(Communicator& c, int64_t n, DType dtype);
void check_send_recv_ring(Communicator& c, int64_t n, DType dtype);

// Every collective on every group for sizes 0, 1, 7 (F32, BF16, F16, F64)
// or 1000003 (a size no group size divides).
void collectives_small(Communicator& world);
// F16 values that BF16 cannot hold (300 + r + i % 5), a sum past 65504 (inf),
// negative max; sizes 0, 7, 1001 on every group.
void f16_beyond_bf16(Communicator& world);
void collectives_large(Communicator& world, DType dtype);
void async_out_of_order(Communicator& world);
void progress_across_communicators(Communicator& world);
void stats_after_known_sequence(Communicator& world);
void ring_keeps_last_64(Communicator& world);

// The ring all-reduce (ring_bodies.cpp): options that send every F32/F64
// all_reduce through it, in messages of piece_bytes (BF16/F16 must still
// reduce in f32 through MPI_Iallreduce).
Options ring_options(int64_t piece_bytes);
void ring_all_reduce_sizes(Communicator& world);
void ring_bitwise_same_everywhere(Communicator& world);
void ring_many_in_flight(Communicator& world);
Options pair_options(int64_t piece_bytes);
void pair_collectives(Communicator& world);
void transfer_scratch_counts_as_buffers(Communicator& world);

// Failures (failure_bodies.cpp).
void shape_mismatch(Communicator& world);
void skipped_collective(Communicator& world);
void late_rank_times_out(Communicator& world);
void recv_timeout_names_the_peer(Communicator& world);
void recv_size_mismatch(Communicator& world);

}  // namespace kiri::comm::testing
