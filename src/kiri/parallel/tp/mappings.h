#pragma once
// The communication of tensor parallelism (Megatron-LM's
// core/tensor_parallel/mappings.py), as functions on tensors over the tp
// communicator. Each one is half of a pair: the forward of an op and the
// backward of the same op are conjugate collectives (all-reduce <-> identity,
// all-gather <-> reduce-scatter), so a layer calls the matching half in each
// pass and the gradient is exactly the transpose of the forward map.
//
// Notation: tp ranks r = 0 .. P-1, x_r the tensor on rank r.
//
//   f  "copy to region" (enters a column-parallel region):
//        forward   y_r = x                 identity (every rank has x)
//        backward  dx  = sum_r dy_r        all-reduce sum
//   g  "reduce from region" (leaves a row-parallel region):
//        forward   y   = sum_r x_r         all-reduce sum
//        backward  dx_r = dy               identity
//   Sequence parallelism, rows split into P equal blocks (block r = rows
//   [r*N/P, (r+1)*N/P) of N):
//   gather from sequence:
//        forward   full = [x_0; x_1; ...; x_{P-1}]              all-gather
//        backward  dlocal_r = sum_s dfull_s[block r]            reduce-scatter sum
//   reduce-scatter to sequence:
//        forward   local_r = sum_s full_s[block r]              reduce-scatter sum
//        backward  dfull = [dlocal_0; ...; dlocal_{P-1}]        all-gather
//
// Each mapping is one type holding its forward and its conjugate backward, as Megatron's
// autograd functions are; the identity halves are there too, so that a layer's forward and
// backward name the same type. A group of one rank bypasses every collective (the halves
// that write an output copy their input into it).
//
// Tensors are contiguous, F32, BF16 or F16 (16-bit sums are taken in f32, see
// communicator.h); [N, ...] shapes split on the first dimension, N from divide() (kConfig
// naming the numbers when P does not divide it). Unlike the kernels' backward passes these
// write their outputs (a collective's result), they do not accumulate into them.
#include "kiri/comm/communicator.h"
#include "kiri/tensor/tensor.h"

namespace kiri::parallel::tp {

// f: enters a column-parallel region.
struct CopyToRegion {
  static void forward(comm::Communicator&, Tensor&) {}         // y = x on every rank
  static void backward(comm::Communicator& tp, Tensor& grad);  // grad = sum over ranks, in place
};

// g: leaves a row-parallel region.
struct ReduceFromRegion {
  static void forward(comm::Communicator& tp, Tensor& x);  // x = sum over ranks, in place
  static void backward(comm::Communicator&, Tensor&) {}    // dx = dy on every rank
};

// Sequence parallelism entering a tensor-parallel region: the rows gathered.
struct GatherFromSequence {
  // full [N, ...] = the ranks' local [N/P, ...] stacked in rank order.
  static void forward(comm::Communicator& tp, const Tensor& local, Tensor& full);
  // dlocal [N/P, ...] = block `rank` of the sum over ranks of dfull [N, ...].
  static void backward(comm::Communicator& tp, const Tensor& dfull, Tensor& dlocal);
};

// Sequence parallelism leaving a tensor-parallel region: the partial sums reduce-scattered.
struct ReduceScatterToSequence {
  // local [N/P, ...] = block `rank` of the sum over ranks of full [N, ...].
  static void forward(comm::Communicator& tp, const Tensor& full, Tensor& local);
  // dfull [N, ...] = the ranks' dlocal [N/P, ...] stacked in rank order.
  static void backward(comm::Communicator& tp, const Tensor& dlocal, Tensor& dfull);
};

}  // namespace kiri::parallel::tp
