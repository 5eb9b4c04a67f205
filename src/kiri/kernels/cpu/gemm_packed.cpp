// gemm_lowp's packed path: 16-bit A and B widened to fp32 as they are packed into the panels
// that an fp32 FMA micro-kernel reads, so that each element is converted in the same pass that
// lays it out for the kernel. via_f32 widens into row-major panels and then oneDNN's sgemm
// packs them again: one more pass over every operand, which on a small step (gpt2-124M: 256
// tokens against 768 x 3072 weights) costs as much as a tenth of the GEMM.
//
// The blocking is BLIS's (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
// Instantiating BLAS Functionality", 2015), with the roles of the caches set for one operand
// packed whole: the kernel computes an MR x NR tile of C over a K block of KC, its A micro-panel
// (MR x KC) stays in L1 while the B micro-panels (KC x NR) stream from L2. Each C element is
// the sum of its K blocks in order, each block's products summed in k order by one FMA chain,
// whatever the threads and the M and N blocking: the same bits on any thread count.
//
// The micro-kernel and the packers are the instruction set's (gemm_packed_avx512.h: 8 x 48;
// gemm_packed_avx2.h: 4 x 24, for CPUs with FMA but no AVX-512); the build's -march picks one,
// and without either via_f32 takes every GEMM.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/lowp_simd.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12 warns about the _mm512_undefined_* placeholders inside its own intrinsics once they
// are inlined here (a known false positive, as in convert.cpp).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kiri/kernels/cpu/gemm_packed_avx512.h"
#define KIRI_PACKED_ISA packed::Avx512
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kiri/kernels/cpu/gemm_packed_avx2.h"
#define KIRI_PACKED_ISA packed::Avx2
#endif

namespace kiri::kernels::cpu::detail {

#ifdef KIRI_PACKED_ISA
namespace {

using namespace packed;
using Isa = KIRI_PACKED_ISA;
constexpr int64_t kMR = Isa::kMR, kNR = Isa::kNR;
static_assert(Isa::kNV == 3, "micro_cols covers tiles of 1 to 3 vectors");

// A tile of all MR rows and nr < NR columns: as few vectors as cover them, the last masked.
template <DType CD>
void micro_cols(int64_t kc, const float* a, const float* b, void* c, int64_t ldc, int64_t nr,
                float alpha, float beta) {
  const int nv = static_cast<int>(ceil_div(nr, Isa::kL));
  const int lanes = static_cast<int>(nr - Isa::kL * (nv - 1));
  if (nv == 1) return Isa::micro<CD, 1, true>(kc, a, b, c, ldc, alpha, beta, lanes);
  if (nv == 2) return Isa::micro<CD, 2, true>(kc, a, b, c, ldc, alpha, beta, lanes);
  Isa::micro<CD, 3, true>(kc, a, b, c, ldc, alpha, beta, lanes);
}

// A tile of fewer than MR rows (C's last rows), through a full one in scratch; each element
// rounded as micro rounds it.
template <DType CD>
void micro_edge(int64_t kc, const float* a, const float* b, void* c, int64_t ldc, int64_t mr,
                int64_t nr, float alpha, float beta) {
  alignas(64) float t[kMR * kNR];
  Isa::micro<DType::kF32>(kc, a, b, t, kNR, 1.0f, 0.0f);
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) write_element<CD>(c, i * ldc + j, t[i * kNR + j], alpha, beta);
}

// C[rows, cols] at c (dtype CD, leading dimension ldc) with beta: the packed A panels of those
// rows (ap, [kc, MR] each) times the packed B panels of those columns (bp, [kc, NR] each). ir
// outer: an A micro-panel stays in L1 while the B panels stream from L2 (B's in L1 and A's
// streaming, with KC 128 for room, measured 1.08x slower on gpt2-124M's step).
template <DType CD>
void tiles(int64_t kc, const float* ap, const float* bp, void* c, int64_t ldc, int64_t rows,
           int64_t cols, float alpha, float beta) {
  char* cb = static_cast<char*>(c);
  for (int64_t i = 0; i < rows; i += kMR) {
    const float* a = ap + (i / kMR) * kc * kMR;
    const int64_t mr = std::min(kMR, rows - i);
    for (int64_t j = 0; j < cols; j += kNR) {
      const float* b = bp + (j / kNR) * kc * kNR;
      const int64_t nr = std::min(kNR, cols - j);
      void* ct = cb + (i * ldc + j) * kSize<CD>;
      if (mr == kMR && nr == kNR)
        Isa::micro<CD>(kc, a, b, ct, ldc, alpha, beta);
      else if (mr == kMR)
        micro_cols<CD>(kc, a, b, ct, ldc, nr, alpha, beta);
      else
        micro_edge<CD>(kc, a, b, ct, ldc, mr, nr, alpha, beta);
    }
  }
}

// 64-byte aligned, per thread, grown to the largest size asked for (never shrunk or cleared:
// a vector made per call was zeroed per call). whole: the operand packed whole, in the calling
// thread's; a, b, c: a block of A, of B and a 16-bit C's fp32 panel, in each thread's own.
struct Buffers {
  std::vector<float> whole, a, b, c;
};
Buffers& buffers() {
  thread_local Buffers s;
  return s;
}
float* aligned(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n + 16) v.resize(static_cast<size_t>(n + 16));
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

// How C is written for one block of it: in place (an fp32 C, or a 16-bit C summed in one K
// block, rounded by the kernel), or a 16-bit C of several K blocks through an fp32 panel that
// is rounded into C (added into it when beta is 1) once every K block is summed.
struct CBlock {
  void* c;
  int64_t ldc;
  DType dt;    // the dtype the kernel writes: C's, or F32 into the panel
  bool panel;  // finish_c rounds the panel into C
};
CBlock c_block(const LowpGemmArgs& g, int64_t m0, int64_t rows, int64_t n0, int64_t cols) {
  const int64_t es = static_cast<int64_t>(dtype_size(g.c_dtype));
  if (g.c_dtype == DType::kF32 || g.K <= kKC)
    return {static_cast<char*>(g.C) + (m0 * g.ldc + n0) * es, g.ldc, g.c_dtype, false};
  return {aligned(buffers().c, rows * cols), cols, DType::kF32, true};
}
void finish_c(const LowpGemmArgs& g, const CBlock& cb, int64_t m0, int64_t rows, int64_t n0,
              int64_t cols) {
  if (!cb.panel) return;
  char* base = static_cast<char*>(g.C);
  const int64_t es = static_cast<int64_t>(dtype_size(g.c_dtype));
  const float* panel = static_cast<const float*>(cb.c);
  for (int64_t r = 0; r < rows; ++r) {
    void* row = base + ((m0 + r) * g.ldc + n0) * es;
    if (g.beta == 1.0f)
      add_f32_into(row, g.c_dtype, panel + r * cols, cols);
    else
      from_f32(row, g.c_dtype, panel + r * cols, cols);
  }
}
// K block pc of C block cb: the caller's beta for the first (0 into a panel, whose beta
// finish_c applies), then 1.
void block_tiles(const LowpGemmArgs& g, const CBlock& cb, int64_t pc, int64_t kc, const float* ap,
                 const float* bp, int64_t rows, int64_t cols) {
  const float beta = pc > 0 ? 1.0f : cb.panel ? 0.0f : g.beta;
  switch (cb.dt) {
    case DType::kBF16:
      return tiles<DType::kBF16>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
    case DType::kF16:
      return tiles<DType::kF16>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
    default:
      return tiles<DType::kF32>(kc, ap, bp, cb.c, cb.ldc, rows, cols, g.alpha, beta);
  }
}

Src src_a(const LowpGemmArgs& g) {
  return {static_cast<const uint16_t*>(g.A), g.lda, g.trans_a};
}
// B as the packer reads it: rows are C's columns (so B's own layout reads transposed).
Src src_b(const LowpGemmArgs& g) {
  return {static_cast<const uint16_t*>(g.B), g.ldb, !g.trans_b};
}

// op(A) packed whole (M x K at most kWhole), B packed a block of kNC columns and a K block at a
// time, the column blocks spread over the threads.
template <DType D>
void a_whole(const LowpGemmArgs& g, int threads) {
  const int64_t mp = round_up(g.M, kMR), nkb = ceil_div(g.K, kKC);
  float* ap = aligned(buffers().whole, mp * g.K);  // K block pc at ap + pc * kKC * mp
  const Src sa = src_a(g), sb = src_b(g);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pc = 0; pc < nkb; ++pc) {
    const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
    Isa::pack<D, kMR>(ap + k0 * mp, sa, 0, g.M, k0, kc);
  }
  // Column blocks: kNC at most, a multiple of the threads in number (whole tiles each).
  int64_t nblk = ceil_div(g.N, kNC);
  nblk = round_up(std::max<int64_t>(nblk, threads), threads);
  const int64_t nc = round_up(ceil_div(g.N, nblk), kNR);
  nblk = ceil_div(g.N, nc);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t jb = 0; jb < nblk; ++jb) {
    const int64_t n0 = jb * nc, cols = std::min(nc, g.N - n0);
    const CBlock cb = c_block(g, 0, g.M, n0, cols);
    float* bp = aligned(buffers().b, std::min(kKC, g.K) * round_up(cols, kNR));
    for (int64_t pc = 0; pc < nkb; ++pc) {
      const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
      Isa::pack<D, kNR>(bp, sb, n0, cols, k0, kc);
      block_tiles(g, cb, pc, kc, ap + k0 * mp, bp, g.M, cols);
    }
    finish_c(g, cb, 0, g.M, n0, cols);
  }
}

// B packed whole (K x N at most kWhole), op(A) packed a block of kMC rows and a K block at a
// time, the row blocks spread over the threads.
template <DType D>
void b_whole(const LowpGemmArgs& g, int threads) {
  const int64_t np = round_up(g.N, kNR), nkb = ceil_div(g.K, kKC);
  float* bp = aligned(buffers().whole, np * g.K);  // K block pc at bp + pc * kKC * np
  const Src sa = src_a(g), sb = src_b(g);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t pc = 0; pc < nkb; ++pc) {
    const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
    Isa::pack<D, kNR>(bp + k0 * np, sb, 0, g.N, k0, kc);
  }
  const int64_t mblk = ceil_div(g.M, kMC);
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t ib = 0; ib < mblk; ++ib) {
    const int64_t m0 = ib * kMC, rows = std::min(kMC, g.M - m0);
    const CBlock cb = c_block(g, m0, rows, 0, g.N);
    float* ap = aligned(buffers().a, std::min(kKC, g.K) * round_up(rows, kMR));
    for (int64_t pc = 0; pc < nkb; ++pc) {
      const int64_t k0 = pc * kKC, kc = std::min(kKC, g.K - k0);
      Isa::pack<D, kMR>(ap, sa, m0, rows, k0, kc);
      block_tiles(g, cb, pc, kc, ap, bp + k0 * np, rows, g.N);
    }
    finish_c(g, cb, m0, rows, 0, g.N);
  }
}

// Neither operand fits whole (the LM head's input gradient: K = V), an fp32 C: the K blocks
// outermost, each A block (M x KC) packed once and the B block of each thread's columns
// beside it, C accumulating in place.
template <DType D>
void k_outer(const LowpGemmArgs& g, int threads) {
  const int64_t mp = round_up(g.M, kMR);
  float* ap = aligned(buffers().whole, mp * std::min(kKC, g.K));
  const Src sa = src_a(g), sb = src_b(g);
  int64_t nblk = round_up(std::max<int64_t>(ceil_div(g.N, kNC), threads), threads);
  const int64_t nc = round_up(ceil_div(g.N, nblk), kNR);
  nblk = ceil_div(g.N, nc);
  float* c = static_cast<float*>(g.C);
  for (int64_t k0 = 0; k0 < g.K; k0 += kKC) {
    const int64_t kc = std::min(kKC, g.K - k0);
    const float beta = k0 == 0 ? g.beta : 1.0f;
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
#pragma omp for schedule(static)
      for (int64_t p = 0; p < mp / kMR; ++p)
        Isa::pack<D, kMR>(ap + p * kc * kMR, sa, p * kMR, std::min(kMR, g.M - p * kMR), k0, kc);
#pragma omp for schedule(static)
      for (int64_t jb = 0; jb < nblk; ++jb) {
        const int64_t n0 = jb * nc, cols = std::min(nc, g.N - n0);
        float* bp = aligned(buffers().b, kc * round_up(cols, kNR));
        Isa::pack<D, kNR>(bp, sb, n0, cols, k0, kc);
        tiles<DType::kF32>(kc, ap, bp, c + n0, g.ldc, g.M, cols, g.alpha, beta);
      }
    }
  }
}

// How the packed kernel cuts g, or kNone where it does not take it.
enum class Plan { kNone, kAWhole, kBWhole, kKOuter };
Plan plan(const LowpGemmArgs& g) {
  // A 16-bit C takes beta 0 or 1 (the linear layers' two); others go via_f32.
  if (g.c_dtype != DType::kF32 && g.beta != 0.0f && g.beta != 1.0f) return Plan::kNone;
  if (g.M * g.K <= kWhole && g.M <= g.N) return Plan::kAWhole;
  if (g.K * g.N <= kWhole) return Plan::kBWhole;
  if (g.c_dtype == DType::kF32 && g.M * kKC <= kWhole) return Plan::kKOuter;
  return Plan::kNone;
}

template <DType D>
void run_packed(const LowpGemmArgs& g, Plan p) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (p == Plan::kAWhole) return a_whole<D>(g, threads);
  if (p == Plan::kBWhole) return b_whole<D>(g, threads);
  k_outer<D>(g, threads);
}

}  // namespace

bool gemm_lowp_packed_supported() {
  return true;
}

bool gemm_lowp_packed_takes(const LowpGemmArgs& g) {
  return plan(g) != Plan::kNone;
}

bool gemm_lowp_packed(const LowpGemmArgs& g) {
  const Plan p = plan(g);
  if (p == Plan::kNone) return false;
  if (g.ab == DType::kBF16)
    run_packed<DType::kBF16>(g, p);
  else
    run_packed<DType::kF16>(g, p);
  return true;
}

#else  // neither AVX-512 nor AVX2 with FMA and F16C: via_f32 takes every GEMM

bool gemm_lowp_packed_supported() {
  return false;
}
bool gemm_lowp_packed_takes(const LowpGemmArgs&) {
  return false;
}
bool gemm_lowp_packed(const LowpGemmArgs&) {
  return false;
}

#endif

}  // namespace kiri::kernels::cpu::detail
