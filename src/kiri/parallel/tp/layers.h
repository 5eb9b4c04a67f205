#pragma once
// Megatron-LM's tensor-parallel layers (core/tensor_parallel/layers.py): the linear layers cut
// over the P tp ranks and the entry of a column-parallel region, each by its math below. They
// compute with nn's layer math (nn/layers.h) and communicate only through mappings.h: the
// forward of each layer calls one half of a conjugate pair and its backward the other, so the
// gradient is the transpose of the forward map.
//
// Notation: rank r of P, X [N, C] the rows of a micro-batch (N = B*T tokens). Under sequence
// parallelism (Megatron's --sequence-parallel) the residual stream, the norms and the
// residual adds hold only this rank's block of rows, X_r = rows [r*N/P, (r+1)*N/P) of the
// batch-major token rows; the column-parallel region gathers them and the row-parallel layer
// scatters its sum back, in place of tensor parallelism's two all-reduces:
//
//   region            tensor parallel                 + sequence parallel
//   enter (f)         fwd identity, bwd all-reduce    fwd all-gather, bwd reduce-scatter
//   leave (g)         fwd all-reduce, bwd identity    fwd reduce-scatter, bwd all-gather
//
// (an all-reduce moves the bytes of a reduce-scatter plus an all-gather: the same volume).
#include <functional>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/nn/layers.h"

namespace kiri::parallel::tp {

// A model's tensor-parallel group, and whether the sequence is split over it.
struct TensorParallel {
  comm::Communicator* group = nullptr;  // nullptr or one rank: no tensor parallelism
  bool sequence_parallel = false;       // takes effect with more than one rank
  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  bool on() const { return size() > 1; }
  bool split_sequence() const { return sequence_parallel && on(); }
  // The rows of the residual stream this rank holds of `rows`: all of them, or under sequence
  // parallelism rows / P (kConfig naming the numbers when P does not divide them).
  int64_t local_rows(int64_t rows) const;
};

// Tensor parallelism is applied to a built model (model/parallelize.h's apply_tp), as torchtitan
// parallelizes a model built on the meta device: the layers are constructed whole, and their
// parameters exist only as shapes until a ParameterStore binds them. Cutting a parameter makes
// `shape` this rank's part of `full` along `dim` (by `blocks` equal blocks, q | k | v, each cut
// apart), so that counter-based initialisation gives every rank its slice of the one-process
// values. kInternal once the parameter is bound or cut already; kConfig naming the numbers when
// P does not divide the dimension. Nothing changes on one rank.
void cut_parameter(nn::Parameter& p, const TensorParallel& tp, int dim, int blocks = 1);
// The same for a [V, C] table cut by vocabulary rows (vocab_parallel.h's vocab_rows).
void cut_parameter_rows(nn::Parameter& p, int64_t rows, const nn::TpSplit& cut);

// The input of a column-parallel region, shared by the column-parallel layers that read it
// (c_attn; c_fc; q, k and v; gate and up):
//   tensor parallel      forward  X_region = X                (f: every rank has the whole X)
//                        backward dX = sum_r dX_r             (all-reduce of the layers' summed
//                                                              partial input gradients)
//   sequence parallel    forward  X_region = [X_0; ...; X_{P-1}]   all-gather of the ranks' rows
//                        backward dX_r = block r of sum_s dX_s      reduce-scatter
// It keeps what the layers' weight gradients need, X_region [N, C], whole under sequence
// parallelism too: Megatron keeps only X_r and all-gathers it again in backward, which would
// move (P-1)/P of X_region's bytes more per region and micro-batch than tensor parallelism;
// kept whole, sequence parallelism moves exactly tensor parallelism's bytes (each all-reduce
// becomes a reduce-scatter and an all-gather) and splits the norms' and the residual stream's
// activations. Under mixed precision X_region is the 16-bit copy the GEMMs take, converted
// once for all the region's layers, after the all-gather (which moves T values, as the
// all-reduces do).
// With a source set (selective recomputation's `layernorm`) it keeps nothing: backward asks the
// source for x again (the norm recomputes its output from its own saved input) and rebuilds
// X_region as forward did, under sequence parallelism with a second all-gather of x, as
// Megatron does: (P-1)/P of X_region's T bytes more per region and micro-batch.
template <typename T>
class ColumnParallelInput {
 public:
  ColumnParallelInput() = default;  // one rank until apply_tp
  void apply_tp(const TensorParallel& tp) { tp_ = tp; }
  // x again for ctx's micro-batch, [N, C] of T (sequence parallel: [N/P, C]); empty: keep.
  using Source = std::function<Tensor(nn::Context&)>;
  void set_source(Source source) { source_ = std::move(source); }
  // x: [N, C] of T (sequence parallel: this rank's rows [N/P, C]); weight: a weight of the
  // region's layers (its dtype decides mixed precision). Returns X_region [N, C].
  Tensor forward(nn::Context& ctx, const Tensor& x, const Tensor& weight);
  // Backward: X_region [N, C] as forward kept it (or rebuilt from the source; the same weight).
  Tensor saved_input(nn::Context& ctx, const Tensor& weight);
  // Where the region's layers accumulate their input gradient for dx [N or N/P, C]: dx itself
  // without tensor parallelism, else a zeroed partial [N, C]; finish_backward() then adds
  // f's all-reduce (or the reduce-scatter) of it into dx.
  Tensor grad_target(nn::Context& ctx, Tensor& dx, int64_t rows) const;
  void finish_backward(nn::Context& ctx, Tensor& target, Tensor& dx) const;

 private:
  Tensor region(nn::Context& ctx, const Tensor& x, const Tensor& weight);

  TensorParallel tp_;
  Source source_;
  nn::Saved<Tensor> x_;  // [N, C] X_region (16-bit under mixed precision); none with a source
};

// Y_r = X A_r + b_r: A [in, out] (in nn.Linear's layout its transpose) cut by output columns,
// rank r holding A_r = columns [r*out/P, (r+1)*out/P) (with `blocks` > 1 each of that many
// equal column blocks, q | k | v, is cut separately, so rank r holds its heads of each), b
// likewise. X is the region's input (ColumnParallelInput); no communication. Constructed whole
// (in, out); apply_tp cuts it.
//   forward   Y_r [N, out/P] = X A_r + b_r
//   backward  dX_partial += dY_r A_r^T,  dA_r += X^T dY_r,  db_r += sum over rows of dY_r
template <typename T>
class ColumnParallelLinear final : public nn::Module {
 public:
  ColumnParallelLinear(const std::string& name, int64_t in, int64_t out, double init_std,
                       int blocks = 1, nn::LinearLayout layout = nn::LinearLayout::kConv1D);
  // Keeps this rank's output columns (before the parameters are bound).
  void apply_tp(const TensorParallel& tp);
  Tensor forward(nn::Context& ctx, const Tensor& x_region);
  void backward(nn::Context& ctx, const Tensor& dy, const Tensor& x_region, Tensor& dx_partial);
  // backward in two halves when forward's output Y went through GELU (GPT-2's c_fc), fused:
  // gelu_bias_backward takes dg, the gradient of GELU(Y), and h = Y, and returns dY [N, out/P]
  // in the dtype the GEMMs take (16-bit under mixed precision), adding the bias gradient in
  // the same pass (kernels::gelu_backward_bias; by value: released on return); backward_gemms
  // then runs backward's GEMMs on it, without the bias. The same values as GELU's backward,
  // then backward().
  Tensor gelu_bias_backward(nn::Context& ctx, Tensor dg, Tensor h);
  void backward_gemms(nn::Context& ctx, const Tensor& dy, const Tensor& x_region,
                      Tensor& dx_partial);
  nn::Parameter& weight() { return *weight_; }
  int64_t cols() const;  // this rank's output columns, out/P

 private:
  nn::Parameter* weight_;
  nn::Parameter* bias_ = nullptr;
  int blocks_;
  nn::LinearLayout layout_;
};

// Y = sum_r X_r A_r + b: A cut by input rows, rank r holding A_r = rows [r*in/P, (r+1)*in/P)
// and X_r [N, in/P], the column-parallel layer's output; b whole.
//   tensor parallel    forward  Y = g(X_r A_r) + b          all-reduce, then the whole bias
//                      backward dX_r = dY A_r^T, dA_r = X_r^T dY, db = sum over rows of dY
//                               (g backward: identity, dY is whole on every rank)
//   sequence parallel  forward  Y_r [N/P, out] = block r of sum_s X_s A_s, + b   reduce-scatter
//                      backward dY = all-gather of the ranks' dY_r, then as above (db from the
//                               gathered dY: whole on every rank, no further sum)
template <typename T>
class RowParallelLinear final : public nn::Module {
 public:
  RowParallelLinear(const std::string& name, int64_t in, int64_t out, double init_std,
                    nn::LinearLayout layout = nn::LinearLayout::kConv1D);
  // Keeps this rank's input rows and sums over tp (before the parameters are bound).
  void apply_tp(const TensorParallel& tp);
  // Recompute on (selective recomputation's `mlp_act`): forward keeps no input; backward
  // takes it from its caller, computed again.
  void set_recompute_input(bool on) { recompute_input_ = on; }
  Tensor forward(nn::Context& ctx, const Tensor& x);
  // Accumulates into dx [N, in/P]. x: the forward's input [N, in/P] of T (or already in the
  // 16-bit weight's dtype), computed again, exactly when recompute is on.
  void backward(nn::Context& ctx, const Tensor& dy, Tensor& dx, const Tensor& x = Tensor());
  nn::Parameter& weight() { return *weight_; }

 private:
  nn::Parameter* weight_;
  nn::Parameter* bias_ = nullptr;
  TensorParallel tp_;
  nn::LinearLayout layout_;
  bool recompute_input_ = false;
  nn::Saved<Tensor> x_;  // [N, in/P] (16-bit under mixed precision); none with recompute
};

// The gradients of parameters applied to this rank's rows only (the norms' under sequence
// parallelism): a replicated parameter w used on every rank's rows has dw = sum_r dw_r, the
// backward of f (copy to region). run() points these parameters' gradients at one zeroed
// buffer of the compute dtype while `backward` runs, sums the buffer over tp (one all-reduce) and
// adds it into the gradients, so that accumulation over micro-batches adds each micro-batch's sum
// once. Without sequence parallelism it only runs `backward` (the gradients are whole already).
class SequenceParallelGrads {
 public:
  SequenceParallelGrads() = default;
  // dtype: the layers' compute dtype (their gradient targets' under mixed precision).
  SequenceParallelGrads(const TensorParallel& tp, std::vector<nn::Parameter*> params, DType dtype);
  void run(nn::Context& ctx, const std::function<void()>& backward) const;

 private:
  TensorParallel tp_;
  DType dtype_ = DType::kF32;
  std::vector<nn::Parameter*> params_;
  int64_t numel_ = 0;
};

}  // namespace kiri::parallel::tp
