#include "kiri/bench/step_gemms.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/stats.h"
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
struct ReplayBuffers {
  std::vector<float> a, b, c;      // fp32 step
  std::vector<uint16_t> a16, b16;  // 16-bit step: A and B
  std::vector<uint16_t> c16;       // ... and its 16-bit weight gradients
};

ReplayBuffers replay_buffers(const std::vector<StepGemm>& gemms, DType dtype) {
  int64_t max_a = 0, max_b = 0, max_c = 0;
  for (const StepGemm& s : gemms) {
    max_a = std::max(max_a, s.m * s.k);
    max_b = std::max(max_b, s.k * s.n);
    max_c = std::max(max_c, s.m * s.n);
  }
  ReplayBuffers r;
  // Small values: the accumulating (beta 1) replays stay finite however often they run.
  r.c.assign(static_cast<size_t>(max_c), 0.0f);
  if (dtype == DType::kF32) {
    r.a.assign(static_cast<size_t>(max_a), 0.01f);
    r.b.assign(static_cast<size_t>(max_b), 0.02f);
    return r;
  }
  auto bits = [dtype](float x) {
    return dtype == DType::kBF16 ? float_to_bf16(x) : float_to_half(x);
  };
  r.a16.assign(static_cast<size_t>(max_a), bits(0.01f));
  r.b16.assign(static_cast<size_t>(max_b), bits(0.02f));
  r.c16.assign(static_cast<size_t>(max_c), bits(0.0f));
  return r;
}

void replay_linear_gemms(const std::vector<StepGemm>& gemms, DType dtype, ReplayBuffers& r) {
  for (const StepGemm& s : gemms) {
    const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    if (dtype == DType::kF32) {
      kernels::gemm<float>(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, r.a.data(), lda, r.b.data(),
                           ldb, s.beta, r.c.data(), s.n);
    } else {
      void* c = s.c_dtype == DType::kF32 ? static_cast<void*>(r.c.data()) : r.c16.data();
      kernels::gemm_lowp(dtype, s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, r.a16.data(), lda,
                         r.b16.data(), ldb, s.beta, c, s.c_dtype, s.n);
    }
  }
}

// Attention's products per (batch row, query head) in fp32: QK^T and PV forward; the
// recomputed QK^T, dV, dP, dQ and dK backward (each of 2 t^2 hs FLOPs).
void replay_attention(const kiri::GPTConfig& c, int64_t b, int64_t t, std::vector<float>& att,
                      const std::vector<float>& q, std::vector<float>& o) {
  const int64_t hs = c.n_embd / c.n_head, bh = b * c.n_head;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < bh; ++i) {
    float* s = att.data() + static_cast<size_t>(omp_get_thread_num()) * t * t;
    const float* qh = q.data() + (i / c.n_head) * t * 3 * c.n_embd + (i % c.n_head) * hs;
    float* oh = o.data() + (i / c.n_head) * t * c.n_embd + (i % c.n_head) * hs;
    for (int r = 0; r < 7; ++r) {
      if (r % 2 == 0)
        kernels::gemm<float>(false, true, t, t, hs, 1.0f, qh, 3 * c.n_embd, qh, 3 * c.n_embd, 0.0f,
                             s, t);
      else
        kernels::gemm<float>(false, false, t, hs, t, 1.0f, s, t, qh, 3 * c.n_embd, 0.0f, oh,
                             c.n_embd);
    }
  }
}

}  // namespace

double time_step_gemms(const kiri::GPTConfig& c, int64_t batch, int64_t seq, DType dtype,
                       int replays) {
  KIRI_CHECK_KIND(kConfig, replays >= 1, "time_step_gemms: replays must be >= 1, got ", replays);
  const std::vector<StepGemm> gemms = step_linear_gemms(c, batch, seq, dtype);
  ReplayBuffers r = replay_buffers(gemms, dtype);
  std::vector<float> att(static_cast<size_t>(omp_get_max_threads()) * seq * seq);  // [P,T,T]
  const std::vector<float> q(batch * seq * 3 * c.n_embd, 0.01f);                   // [B,T,3C]
  std::vector<float> o(batch * seq * c.n_embd);                                    // [B,T,C]
  std::vector<double> times;
  for (int rep = 0; rep <= replays; ++rep) {
    Timer timer;
    replay_linear_gemms(gemms, dtype, r);
    replay_attention(c, batch, seq, att, q, o);
    if (rep > 0) times.push_back(timer.seconds());  // the first one warms up
  }
  return median(times);
}

}  // namespace kiri::bench
