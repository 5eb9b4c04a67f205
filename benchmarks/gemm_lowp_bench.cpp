// GFLOP/s of gemm<float> (oneDNN sgemm) against gemm_lowp in bf16 and f16 on
// the GEMMs of one linear layer's forward and backward for the `tiny` model
// with 1024 tokens, at 1 and 2 threads. Weight gradients accumulate (beta 1)
// into a C of the operands' dtype, as linear_backward_lowp does; the others
// write an fp32 C. "bf16 matmul" forces the oneDNN bf16 matmul primitive.
//   build/gemm_lowp_bench [reps] [threads]   (threads: both 1 and 2 when omitted)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "kiri/base/rng.h"
#include "kiri/kernels/ops.h"
#include "kiri/tensor/dtype.h"

namespace {

using kiri::DType;
using kiri::kernels::LowpGemmImpl;

struct Case {
  const char* what;
  bool ta, tb;
  int64_t M, N, K;
};

// (IC -> OC) layer over N tokens: forward NN [N,OC,IC], input grad NT
// [N,IC,OC], weight grad TN [IC,OC,N]. The LM head (logits = x @ wte^T,
// wte [V,C]) is NT forward, NN input grad, TN weight grad [V,C,N].
const Case kCases[] = {
    {"qkv fwd", false, false, 1024, 768, 256},   {"qkv dinp", false, true, 1024, 256, 768},
    {"qkv dW", true, false, 256, 768, 1024},     {"fc fwd", false, false, 1024, 1024, 256},
    {"fc dinp", false, true, 1024, 256, 1024},   {"fc dW", true, false, 256, 1024, 1024},
    {"proj fwd", false, false, 1024, 256, 1024}, {"proj dinp", false, true, 1024, 1024, 256},
    {"proj dW", true, false, 1024, 256, 1024},   {"lm fwd", false, true, 1024, 50257, 256},
    {"lm dinp", false, false, 1024, 256, 50257}, {"lm dW", true, false, 50257, 256, 1024},
};

double best_seconds(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: primitive creation, scratch, page faults
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<float> random_floats(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(kiri::random_normal(3, stream, i));
  return v;
}

std::vector<uint16_t> rounded(const std::vector<float>& v, DType dt) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = dt == DType::kBF16 ? kiri::float_to_bf16(v[i]) : kiri::float_to_half(v[i] * 0.1f);
  return h;
}

// GFLOP/s of gemm_lowp in `dt` with implementation `impl` on case c.
double lowp_gflops(const Case& c, DType dt, LowpGemmImpl impl, const std::vector<float>& a32,
                   const std::vector<float>& b32, int reps) {
  kiri::kernels::set_gemm_lowp_impl(impl);
  const std::vector<uint16_t> a = rounded(a32, dt), b = rounded(b32, dt);
  const bool dw = c.ta;  // weight gradient: accumulate into a 16-bit C
  std::vector<uint16_t> c16(dw ? c.M * c.N : 0, 0);
  std::vector<float> c32(dw ? 0 : c.M * c.N);
  void* C = dw ? static_cast<void*>(c16.data()) : c32.data();
  const double t = best_seconds(
      [&] {
        kiri::kernels::gemm_lowp(dt, c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.ta ? c.M : c.K,
                                 b.data(), c.tb ? c.K : c.N, dw ? 1.0f : 0.0f, C,
                                 dw ? dt : DType::kF32, c.N);
      },
      reps);
  kiri::kernels::set_gemm_lowp_impl(LowpGemmImpl::kAuto);
  return 2.0 * c.M * c.N * c.K / t * 1e-9;
}

void run(int threads, int reps) {
  omp_set_num_threads(threads);
  std::printf("\n%d thread%s\n", threads, threads > 1 ? "s" : "");
  std::printf(
      "| GEMM | op | M x N x K | fp32 | bf16 | f16 | bf16/fp32 | f16/fp32 | bf16 matmul |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Case& c : kCases) {
    const std::vector<float> a = random_floats(c.M * c.K, 1), b = random_floats(c.K * c.N, 2);
    std::vector<float> cf(c.M * c.N, 0.0f);
    const float beta = c.ta ? 1.0f : 0.0f;
    const double t32 = best_seconds(
        [&] {
          kiri::kernels::gemm<float>(c.ta, c.tb, c.M, c.N, c.K, 1.0f, a.data(), c.ta ? c.M : c.K,
                                     b.data(), c.tb ? c.K : c.N, beta, cf.data(), c.N);
        },
        reps);
    const double g32 = 2.0 * c.M * c.N * c.K / t32 * 1e-9;
    const double gbf = lowp_gflops(c, DType::kBF16, LowpGemmImpl::kAuto, a, b, reps);
    const double gh = lowp_gflops(c, DType::kF16, LowpGemmImpl::kAuto, a, b, reps);
    const double gmm = lowp_gflops(c, DType::kBF16, LowpGemmImpl::kOneDnnMatmul, a, b, reps);
    std::printf("| %s | %s%s | %lld x %lld x %lld | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f |\n",
                c.what, c.ta ? "T" : "N", c.tb ? "T" : "N", static_cast<long long>(c.M),
                static_cast<long long>(c.N), static_cast<long long>(c.K), g32, gbf, gh, gbf / g32,
                gh / g32, gmm);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf(
      "GFLOP/s (2*M*N*K / best of %d), C = A.B (weight grads: C += A^T.B in the "
      "operands' dtype)\n",
      reps);
  if (argc > 2) return run(std::atoi(argv[2]), reps), 0;
  for (int threads : {1, 2}) run(threads, reps);
}
