#include "kiri/parallel/tp/embedding.h"

// The element loops are kernels (ops.h, vocab_slice_embedding_*); this file checks the
// arguments and runs the collectives.
#include "kiri/kernels/ops.h"
#include "kiri/parallel/tp/mappings.h"

namespace kiri::parallel::tp {

namespace {

void check_table(const Tensor& t, const char* op, const char* name) {
  const DType d = t.dtype();
  KIRI_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, op, ": ", name, " is ",
             dtype_name(d), ", expected F32, BF16 or F16");
  KIRI_CHECK(t.rank() == 2, op, ": ", name, " must be [V/tp, C], got ", t.shape().str());
}

// out [B,T,C] = this rank's rows of wte[tokens], zeros elsewhere (no communication).
void vocab_parallel_lookup(comm::Communicator& tp, Tensor& out, const Tensor& tokens,
                           const Tensor& wte_local, int64_t vocab_start) {
  const char* op = "vocab_parallel_embedding_forward";
  check_table(wte_local, op, "wte_local");
  KIRI_CHECK(tokens.dtype() == DType::kI32 && tokens.rank() == 2, op,
             ": tokens must be [B, T] I32, got ", tokens.shape().str(), " ",
             dtype_name(tokens.dtype()));
  const int64_t B = tokens.dim(0), T = tokens.dim(1), C = wte_local.dim(1);
  const int64_t Vl = wte_local.dim(0), V = Vl * tp.size();
  KIRI_CHECK(out.dtype() == DType::kF32 && out.shape() == Shape({B, T, C}), op, ": out ",
             out.shape().str(), " ", dtype_name(out.dtype()), ", expected [", B, ", ", T, ", ", C,
             "] F32");
  KIRI_CHECK(vocab_start == tp.rank() * Vl, op, ": vocab_start ", vocab_start, " on tp rank ",
             tp.rank(), " of a table of ", Vl, " rows per rank, expected ", tp.rank() * Vl);
  const int32_t* tok = tokens.data<int32_t>();  // [B, T]
  for (int64_t i = 0; i < B * T; ++i)
    KIRI_CHECK(tok[i] >= 0 && tok[i] < V, op, ": token ", tok[i], " at position ", i,
               " outside the padded vocabulary of ", V, " (", tp.size(), " ranks x ", Vl, ")");
  kernels::vocab_slice_embedding_lookup(out, tokens, wte_local, vocab_start);
}

}  // namespace

void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& out, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start) {
  vocab_parallel_lookup(tp, out, tokens, wte_local, vocab_start);
  ReduceFromRegion::forward(tp, out);  // g: one non-zero term per row
}

void vocab_parallel_embedding_forward(comm::Communicator& tp, Tensor& full, const Tensor& tokens,
                                      const Tensor& wte_local, int64_t vocab_start, Tensor& local) {
  vocab_parallel_lookup(tp, full, tokens, wte_local, vocab_start);
  const Tensor rows = full.view({full.dim(0) * full.dim(1), full.dim(2)});  // [N, C]
  ReduceScatterToSequence::forward(tp, rows, local);  // one non-zero term per row
}

void vocab_parallel_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                       int64_t vocab_start) {
  const char* op = "vocab_parallel_embedding_backward";
  check_table(dwte_local, op, "dwte_local");
  KIRI_CHECK(dout.dtype() == DType::kF32 && tokens.dtype() == DType::kI32, op, ": dout is ",
             dtype_name(dout.dtype()), ", tokens ", dtype_name(tokens.dtype()),
             ", expected F32 and I32");
  KIRI_CHECK(dout.rank() == 2 && dout.dim(1) == dwte_local.dim(1) && tokens.numel() == dout.dim(0),
             op, ": dout ", dout.shape().str(), ", tokens ", tokens.shape().str(),
             " and dwte_local ", dwte_local.shape().str(), " do not fit");
  const int64_t M = dout.dim(0);
  const int32_t* tok = tokens.data<int32_t>();  // [M]
  for (int64_t i = 0; i < M; ++i)
    KIRI_CHECK(tok[i] >= 0, op, ": token ", tok[i], " at row ", i, " is negative");
  kernels::vocab_slice_embedding_backward(dwte_local, dout, tokens, vocab_start);
}

}  // namespace kiri::parallel::tp
