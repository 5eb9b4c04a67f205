#include "kiri/kernels/ops.h"

#include "kiri/kernels/cpu/ops.h"
#include "kiri/kernels/dispatch.h"

// The fronts of the row ops that tensor parallelism and the model used to loop over
// themselves (ops.h: vocabulary-parallel pieces, small row ops).
namespace kiri::kernels {

using dispatch::Backend;
using dispatch::backend_of;
using dispatch::no_backend;

void vocab_slice_max_and_target(Tensor& max, Tensor& target_logit, const Tensor& logits_local,
                                const Tensor& targets, int64_t real, int64_t start) {
  switch (
      backend_of("vocab_slice_max_and_target", {&max, &target_logit, &logits_local, &targets})) {
    case Backend::kCpu:
      return cpu::vocab_slice_max_and_target(max, target_logit, logits_local, targets, real, start);
  }
  no_backend("vocab_slice_max_and_target");
}

void vocab_slice_sum_exp(Tensor& sum, const Tensor& logits_local, const Tensor& max, int64_t real) {
  switch (backend_of("vocab_slice_sum_exp", {&sum, &logits_local, &max})) {
    case Backend::kCpu:
      return cpu::vocab_slice_sum_exp(sum, logits_local, max, real);
  }
  no_backend("vocab_slice_sum_exp");
}

void vocab_slice_finish_loss(Tensor& losses, Tensor& lse, const Tensor& sum,
                             const Tensor& targets) {
  switch (backend_of("vocab_slice_finish_loss", {&losses, &lse, &sum, &targets})) {
    case Backend::kCpu:
      return cpu::vocab_slice_finish_loss(losses, lse, sum, targets);
  }
  no_backend("vocab_slice_finish_loss");
}

void vocab_slice_xent_backward(Tensor& logits_to_dlogits_local, const Tensor& lse,
                               const Tensor& targets, const Tensor& dloss, int64_t real,
                               int64_t start) {
  switch (
      backend_of("vocab_slice_xent_backward", {&logits_to_dlogits_local, &lse, &targets, &dloss})) {
    case Backend::kCpu:
      return cpu::vocab_slice_xent_backward(logits_to_dlogits_local, lse, targets, dloss, real,
                                            start);
  }
  no_backend("vocab_slice_xent_backward");
}

void vocab_slice_embedding_lookup(Tensor& rows, const Tensor& tokens, const Tensor& wte_local,
                                  int64_t start) {
  switch (backend_of("vocab_slice_embedding_lookup", {&rows, &tokens, &wte_local})) {
    case Backend::kCpu:
      return cpu::vocab_slice_embedding_lookup(rows, tokens, wte_local, start);
  }
  no_backend("vocab_slice_embedding_lookup");
}

void vocab_slice_embedding_backward(Tensor& dwte_local, const Tensor& dout, const Tensor& tokens,
                                    int64_t start) {
  switch (backend_of("vocab_slice_embedding_backward", {&dwte_local, &dout, &tokens})) {
    case Backend::kCpu:
      return cpu::vocab_slice_embedding_backward(dwte_local, dout, tokens, start);
  }
  no_backend("vocab_slice_embedding_backward");
}

template <typename T>
double sum_in_order(const Tensor& x) {
  switch (backend_of("sum_in_order", {&x})) {
    case Backend::kCpu:
      return cpu::sum_in_order<T>(x);
  }
  no_backend("sum_in_order");
}

void add_position_rows(Tensor& rows, const Tensor& pos_table, int64_t first, int64_t seq) {
  switch (backend_of("add_position_rows", {&rows, &pos_table})) {
    case Backend::kCpu:
      return cpu::add_position_rows(rows, pos_table, first, seq);
  }
  no_backend("add_position_rows");
}

// The scalars the callers use: float for training, double for the gradient checks.
template double sum_in_order<float>(const Tensor&);
template double sum_in_order<double>(const Tensor&);

}  // namespace kiri::kernels
