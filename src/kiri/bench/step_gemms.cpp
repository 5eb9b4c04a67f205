#include "kiri/bench/step_gemms.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"
#include "kiri/kernels/ops.h"

namespace kiri::bench {

std::vector<StepGemm> step_linear_gemms(const kiri::GPTConfig& c, int64_t batch, int64_t seq,
                                        DType dtype) {
  KIRI_CHECK_KIND(kConfig, dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
                  "step_linear_gemms: dtype must be F32, BF16 or F16, got ", dtype_name(dtype));
  const int64_t n = batch * seq, e = c.n_embd, v = c.vocab_size;
  const DType dw = dtype;                    // the weight gradient's dtype: the parameters'
  const float fwd_beta = c.llama() ? 0 : 1;  // GPT-2's linears start from their bias
  std::vector<StepGemm> out;
  // Conv1D's [in, out] weight (GPT-2) or nn.Linear's [out, in] (Llama): kernels/cpu/linear.cpp.
  auto linear = [&](int64_t in, int64_t o) {
    const bool out_in = c.llama();
    out.push_back({false, out_in, n, o, in, fwd_beta, DType::kF32});  // y = x W (W^T)
    out.push_back({false, !out_in, n, in, o, 1, DType::kF32});        // dx += dy W^T (W)
    if (out_in)
      out.push_back({true, false, o, in, n, 1, dw});  // dW[o, in] += dy^T x
    else
      out.push_back({true, false, in, o, n, 1, dw});  // dW[in, o] += x^T dy
  };
  const int64_t kv = int64_t{c.kv_heads()} * c.head_dim(), f = c.mlp_width();
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.llama()) {  // q, k, v, o; gate, up, down
      for (int64_t o : {e, kv, kv, e}) linear(e, o);
      linear(e, f);
      linear(e, f);
      linear(f, e);
    } else {  // c_attn, attn.c_proj; c_fc, mlp.c_proj
      linear(e, 3 * e);
      linear(e, e);
      linear(e, f);
      linear(f, e);
    }
  }
  // The LM head, [V, C] tied to the embedding or not (tp/vocab_parallel.cpp).
  out.push_back({false, true, n, v, e, 0, DType::kF32});   // logits = x W^T
  out.push_back({false, false, n, e, v, 1, DType::kF32});  // dx += dlogits W
  out.push_back({true, false, v, e, n, 1, dw});            // dW += dlogits^T x
  return out;
}

namespace {

// Operands for every GEMM of a list: A and B of the largest sizes, C of each dtype.
void allocate_operands(const std::vector<StepGemm>& gemms, DType dtype, std::vector<float>& a,
                       std::vector<float>& b, std::vector<float>& c, std::vector<uint16_t>& a16,
                       std::vector<uint16_t>& b16, std::vector<uint16_t>& c16) {
  int64_t max_a = 0, max_b = 0, max_c = 0;
  for (const StepGemm& s : gemms) {
    max_a = std::max(max_a, s.m * s.k);
    max_b = std::max(max_b, s.k * s.n);
    max_c = std::max(max_c, s.m * s.n);
  }
  // Small values: the accumulating (beta 1) replays stay finite however often they run.
  c.assign(static_cast<size_t>(max_c), 0.0f);
  if (dtype == DType::kF32) {
    a.assign(static_cast<size_t>(max_a), 0.01f);
    b.assign(static_cast<size_t>(max_b), 0.02f);
    return;
  }
  auto bits = [dtype](float x) {
    return dtype == DType::kBF16 ? float_to_bf16(x) : float_to_half(x);
  };
  a16.assign(static_cast<size_t>(max_a), bits(0.01f));
  b16.assign(static_cast<size_t>(max_b), bits(0.02f));
  c16.assign(static_cast<size_t>(max_c), bits(0.0f));
}

}  // namespace

StepGemmReplay::StepGemmReplay(const kiri::GPTConfig& c, int64_t batch, int64_t seq, DType dtype)
    : c_(c),
      batch_(batch),
      seq_(seq),
      dtype_(dtype),
      gemms_(step_linear_gemms(c, batch, seq, dtype)),
      att_(static_cast<size_t>(omp_get_max_threads()) * seq * seq),
      q_(static_cast<size_t>(batch * seq * 3 * c.n_embd), 0.01f),
      o_(static_cast<size_t>(batch * seq * c.n_embd)) {
  allocate_operands(gemms_, dtype, a_, b_, c32_, a16_, b16_, c16_);
}

void StepGemmReplay::linear_gemms() {
  for (const StepGemm& s : gemms_) {
    const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    if (dtype_ == DType::kF32) {
      kernels::gemm<float>(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a_.data(), lda, b_.data(),
                           ldb, s.beta, c32_.data(), s.n);
    } else {
      void* c = s.c_dtype == DType::kF32 ? static_cast<void*>(c32_.data()) : c16_.data();
      kernels::gemm_lowp(dtype_, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a16_.data(), lda,
                         b16_.data(), ldb, s.beta, c, s.c_dtype, s.n);
    }
  }
}

// Attention's products per (batch row, query head) in fp32: QK^T and PV forward; the
// recomputed QK^T, dV, dP, dQ and dK backward (each of 2 t^2 hs FLOPs).
void StepGemmReplay::attention() {
  const int64_t t = seq_, e = c_.n_embd, hs = e / c_.n_head, bh = batch_ * c_.n_head;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < bh; ++i) {
    float* s = att_.data() + static_cast<size_t>(omp_get_thread_num()) * t * t;  // [T,T]
    const float* qh = q_.data() + (i / c_.n_head) * t * 3 * e + (i % c_.n_head) * hs;
    float* oh = o_.data() + (i / c_.n_head) * t * e + (i % c_.n_head) * hs;
    for (int r = 0; r < 7; ++r) {
      if (r % 2 == 0)
        kernels::gemm<float>(false, true, t, t, hs, 1.0f, qh, 3 * e, qh, 3 * e, 0.0f, s, t);
      else
        kernels::gemm<float>(false, false, t, hs, t, 1.0f, s, t, qh, 3 * e, 0.0f, oh, e);
    }
  }
}

double StepGemmReplay::run() {
  Timer timer;
  linear_gemms();
  attention();
  return timer.seconds();
}

}  // namespace kiri::bench
