#include "kiri/parallel/tp/mappings.h"

#include "kiri/parallel/tp/utils.h"

namespace kiri::parallel::tp {

namespace {

void check_float(const Tensor& t, const char* op, const char* name) {
  const DType d = t.dtype();
  KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op, ": ", name, " is ",
             dtype_name(d), ", expected F32, BF16 or F16");
}

// Checks full [N, ...] against local [N/P, ...] (same dtype, same trailing
// shape, N divisible by P = tp.size()). Returns both as 1-D views, as the
// communicator splits a flat tensor into chunk_range() blocks: with N = P *
// N/P these are exactly the row blocks.
std::pair<Tensor, Tensor> sequence_views(comm::Communicator& tp, const Tensor& full,
                                         const Tensor& local, const char* op) {
  check_float(full, op, "the full tensor");
  KIRI_CHECK(full.dtype() == local.dtype(), op, ": full ", dtype_name(full.dtype()), " and local ",
             dtype_name(local.dtype()), " differ");
  KIRI_CHECK(full.rank() >= 1 && full.rank() == local.rank(), op, ": full ", full.shape().str(),
             " and local ", local.shape().str(), " must be [N, ...] and [N/tp, ...]");
  const int64_t rows = divide(full.dim(0), tp.size(), std::string(op) + ": sequence rows over tp");
  bool fits = local.dim(0) == rows;
  for (size_t i = 1; i < full.rank(); ++i) fits = fits && full.dim(i) == local.dim(i);
  KIRI_CHECK(fits, op, ": local ", local.shape().str(), " is not block ", tp.rank(), " of ",
             tp.size(), " of full ", full.shape().str());
  return {full.view({full.numel()}), local.view({local.numel()})};
}

// A group of one: the output is the input.
bool bypass(comm::Communicator& tp, const Tensor& in, Tensor& out) {
  if (tp.size() != 1) return false;
  if (in.raw() != out.raw()) out.copy_from(in);
  return true;
}

}  // namespace

void CopyToRegion::backward(comm::Communicator& tp, Tensor& grad) {
  check_float(grad, "copy_to_region_backward", "grad");
  if (tp.size() > 1) tp.all_reduce(grad, comm::ReduceOp::kSum);
}

void ReduceFromRegion::forward(comm::Communicator& tp, Tensor& x) {
  check_float(x, "reduce_from_region_forward", "x");
  if (tp.size() > 1) tp.all_reduce(x, comm::ReduceOp::kSum);
}

void GatherFromSequence::forward(comm::Communicator& tp, const Tensor& local, Tensor& full) {
  auto [f, l] = sequence_views(tp, full, local, "gather_from_sequence_forward");
  if (!bypass(tp, l, f)) tp.all_gather(l, f);
}

void GatherFromSequence::backward(comm::Communicator& tp, const Tensor& dfull, Tensor& dlocal) {
  auto [f, l] = sequence_views(tp, dfull, dlocal, "gather_from_sequence_backward");
  if (!bypass(tp, f, l)) tp.reduce_scatter(f, l, comm::ReduceOp::kSum);
}

void ReduceScatterToSequence::forward(comm::Communicator& tp, const Tensor& full, Tensor& local) {
  auto [f, l] = sequence_views(tp, full, local, "reduce_scatter_to_sequence_forward");
  if (!bypass(tp, f, l)) tp.reduce_scatter(f, l, comm::ReduceOp::kSum);
}

void ReduceScatterToSequence::backward(comm::Communicator& tp, const Tensor& dlocal,
                                       Tensor& dfull) {
  auto [f, l] = sequence_views(tp, dfull, dlocal, "reduce_scatter_to_sequence_backward");
  if (!bypass(tp, l, f)) tp.all_gather(l, f);
}

}  // namespace kiri::parallel::tp
