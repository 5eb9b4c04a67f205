// A block's residual adds and norms, unfused against fused (kernels' residual_layernorm_forward,
// layernorm_backward_residual and the RMSNorm pair), at the row shapes of kiri bench's configs.
// Forward: x1 = x + a, then norm_2(x1). Backward: dx1 = dy + norm_2'(dh2), then
// dx += norm_1'(dh1), dx += dx1 (the unfused block copied dy into dx1 and added dx1 to dx in
// passes of their own). Each rep starts from memory (a 64 MiB buffer is written between reps,
// as the block's GEMMs evict the rows in a step); unfused and fused alternate, and the median
// of each is printed with their ratio.
//   build/benchmarks/residual_norm_bench [reps] [threads]   (default 200, 1)
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

namespace {

using kiri::Category;
using kiri::DType;
using kiri::Tensor;
namespace k = kiri::kernels;

kiri::Allocator& allocator() {
  static kiri::Allocator a;
  return a;
}

Tensor randn(const kiri::Shape& shape, uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::kF32, Category::kOther, allocator());
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<float>(kiri::random_normal(7, stream, i));
  return t;
}

void evict(std::vector<float>& junk) {
  for (size_t i = 0; i < junk.size(); i += 16) junk[i] += 1.0f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of f, after the caches were flushed.
double timed(const std::function<void()>& f, std::vector<float>& junk) {
  evict(junk);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run(const char* name, bool rms, int64_t N, int64_t C, int reps, std::vector<float>& junk) {
  const kiri::Shape rows{N, C};
  Tensor x = randn(rows, 1), a = randn(rows, 2), dy = randn(rows, 3), dh1 = randn(rows, 4);
  Tensor dh2 = randn(rows, 5), dx = randn(rows, 6), w = randn({C}, 7), b = randn({C}, 8);
  Tensor x1 = randn(rows, 9), y = randn(rows, 10), dx1 = randn(rows, 11);
  Tensor mean = randn({N}, 12), rstd = randn({N}, 13), dw = randn({C}, 14), db = randn({C}, 15);
  auto norm_fwd = [&](const Tensor& in) {
    if (rms)
      k::rmsnorm_forward<float>(y, rstd, in, w, 1e-5);
    else
      k::layernorm_forward<float>(y, mean, rstd, in, w, b);
  };
  auto norm_bwd = [&](Tensor& d, const Tensor& g) {
    if (rms)
      k::rmsnorm_backward<float>(d, dw, g, x1, w, rstd);
    else
      k::layernorm_backward<float>(d, dw, db, g, x1, w, mean, rstd);
  };
  auto fused_bwd = [&](Tensor& d, const Tensor& base, const Tensor& skip, const Tensor& g) {
    if (rms)
      k::rmsnorm_backward_residual<float>(d, base, skip, dw, g, x1, w, rstd);
    else
      k::layernorm_backward_residual<float>(d, base, skip, dw, db, g, x1, w, mean, rstd);
  };
  Tensor none;
  auto fwd_unfused = [&] {
    k::residual_forward<float>(x1, x, a);
    norm_fwd(x1);
  };
  auto fwd_fused = [&] {
    if (rms)
      k::residual_rmsnorm_forward<float>(x1, y, rstd, x, a, w, 1e-5);
    else
      k::residual_layernorm_forward<float>(x1, y, mean, rstd, x, a, w, b);
  };
  auto bwd_unfused = [&] {
    dx1.copy_from(dy);
    norm_bwd(dx1, dh2);
    norm_bwd(dx, dh1);
    k::residual_forward<float>(dx, dx, dx1);
  };
  auto bwd_fused = [&] {
    fused_bwd(dx1, dy, none, dh2);
    fused_bwd(dx, dx, dx1, dh1);
  };
  std::vector<double> fu, ff, bu, bf;
  for (int r = 0; r < reps; ++r) {
    fu.push_back(timed(fwd_unfused, junk));
    ff.push_back(timed(fwd_fused, junk));
    bu.push_back(timed(bwd_unfused, junk));
    bf.push_back(timed(bwd_fused, junk));
  }
  const double mfu = median(fu) * 1e6, mff = median(ff) * 1e6;
  const double mbu = median(bu) * 1e6, mbf = median(bf) * 1e6;
  std::printf("| %s | %s | %lld x %lld | %.1f | %.1f | %.3f | %.1f | %.1f | %.3f |\n", name,
              rms ? "RMSNorm" : "LayerNorm", static_cast<long long>(N), static_cast<long long>(C),
              mfu, mff, mff / mfu, mbu, mbf, mbf / mbu);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  omp_set_num_threads(threads);
  std::vector<float> junk(size_t{16} << 20);  // 64 MiB
  std::printf("%d threads, median of %d reps, microseconds per block\n", threads, reps);
  std::printf(
      "| config | norm | rows x C | forward unfused | fused | fused / unfused | backward "
      "unfused | fused | fused / unfused |\n|---|---|---|---|---|---|---|---|---|\n");
  run("tiny", false, 1024, 256, reps, junk);
  run("gpt2-124M", false, 256, 768, reps, junk);
  run("tiny-llama", true, 1024, 256, reps, junk);
  run("smollm-135M", true, 256, 576, reps, junk);
  return 0;
}
