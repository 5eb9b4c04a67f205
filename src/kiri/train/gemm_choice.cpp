#include "kiri/train/gemm_choice.h"

#include <algorithm>
#include <cmath>

#include "kiri/kernels/ops.h"

namespace kiri::train {
namespace {

std::string gflop_s(double flops) {
  return std::to_string(static_cast<int64_t>(std::llround(flops / 1e9)));
}

// Two lines for the start-up log: "onednn (...), chosen by measurement" and "rates on this
// run's GEMM shapes: 410 GFLOP/s chosen, 230 via_f32, 410 onednn, 250 packed (measured now;
// kept in FILE)".
std::string describe(const kernels::LowpGemmRates& rates) {
  const LowpPassRates p = pass_rates(rates);
  return kernels::gemm_lowp_path_description(rates.ab) +
         ", chosen by measurement\nrates on this run's GEMM shapes: " + gflop_s(p.chosen) +
         " GFLOP/s chosen, " + gflop_s(p.via_f32) + " via_f32, " + gflop_s(p.onednn) + " onednn, " +
         gflop_s(p.packed) + " packed (" +
         (rates.measured > 0 ? "measured now" : "measured before") +
         (rates.cache_file.empty() ? "; not kept: " + rates.cache_note
                                   : "; kept in " + rates.cache_file) +
         ")";
}

}  // namespace

LowpPassRates pass_rates(const kernels::LowpGemmRates& rates) {
  double t_via = 0, t_one = 0, t_best = 0, t_packed = 0, flop = 0;
  for (const kernels::LowpGemmRate& r : rates.shapes) {
    const double f = 2.0 * static_cast<double>(r.shape.M) * static_cast<double>(r.shape.N) *
                     static_cast<double>(r.shape.K);
    flop += f;
    t_via += f / r.via_f32;
    t_one += f / (r.onednn > 0 ? r.onednn : r.via_f32);  // no oneDNN kernel: it falls back
    t_packed += f / (r.packed > 0 ? r.packed : r.via_f32);
    t_best += f / r.fastest();
  }
  if (flop == 0) return {};
  return {flop / t_via, flop / t_one, flop / t_best, flop / t_packed};
}

std::vector<kernels::LowpGemmShape> step_gemm_shapes(const GPTConfig& model, int64_t micro_batch,
                                                     int64_t seq_len, int64_t tp) {
  const int64_t tokens = micro_batch * seq_len;
  tp = std::max<int64_t>(1, tp);
  const int64_t c = model.n_embd, mlp = (model.mlp_width() + tp - 1) / tp;
  const int64_t vocab = (model.vocab_size + tp - 1) / tp;
  // GPT-2's blocks use Conv1D's [in, out] weights, Llama's nn.Linear's [out, in]; both LM
  // heads are [vocab, n_embd].
  std::vector<kernels::LowpGemmShape> out =
      kernels::linear_gemm_shapes(tokens, c, mlp, model.llama(), "mlp");
  for (const kernels::LowpGemmShape& s :
       kernels::linear_gemm_shapes(tokens, c, vocab, true, "lm_head"))
    out.push_back(s);
  return out;
}

GemmLowpChoice choose_gemm_lowp_path(comm::Communicator& group, DType dt,
                                     const std::vector<kernels::LowpGemmShape>& shapes,
                                     Allocator& allocator) {
  using kernels::LowpGemmImpl;
  const LowpGemmImpl setting = kernels::gemm_lowp_impl();
  const auto path_name = [&] { return kernels::gemm_lowp_impl_name(kernels::gemm_lowp_path(dt)); };
  if (setting != LowpGemmImpl::kAuto)
    return {kernels::gemm_lowp_path_description(dt) + " (KIRI_GEMM_LOWP)", path_name(), {}};
  if (!kernels::gemm_lowp_available(LowpGemmImpl::kOneDnnMatmul, dt) &&
      !kernels::gemm_lowp_available(LowpGemmImpl::kPacked, dt))
    return {std::string("via_f32 (oneDNN has no ") + dtype_name(dt) +
                " kernel on this CPU, and this build has no packed kernel)",
            path_name(),
            {}};
  // Rank 0's rates travel as doubles, three per shape; the shapes are every rank's own.
  kernels::LowpGemmRates rates;
  const int64_t n = static_cast<int64_t>(shapes.size());
  Tensor buf = Tensor::zeros({3 * n}, DType::kF64, Category::kBuffers, allocator);
  double* r = buf.data<double>();
  if (group.rank() == 0) {
    rates = kernels::measure_gemm_lowp_rates(dt, shapes);
    for (int64_t i = 0; i < n; ++i) {
      const kernels::LowpGemmRate& x = rates.shapes[static_cast<size_t>(i)];
      r[3 * i] = x.via_f32;
      r[3 * i + 1] = x.onednn;
      r[3 * i + 2] = x.packed;
    }
  }
  group.broadcast(buf, 0);
  if (group.rank() != 0) {
    rates.ab = dt;
    for (int64_t i = 0; i < n; ++i) {
      kernels::LowpGemmRate x{shapes[static_cast<size_t>(i)], r[3 * i], r[3 * i + 1]};
      x.packed = r[3 * i + 2];
      rates.shapes.push_back(x);
    }
  }
  kernels::set_gemm_lowp_rates(rates);
  return {describe(rates), path_name(), rates};
}

}  // namespace kiri::train
