// gemm_lowp: 16-bit A and B, fp32 accumulation, by one of three paths: oneDNN's matmul on
// the 16-bit data (vdpbf16ps or AMX), or the operands widened to fp32 panel by panel and
// multiplied by oneDNN's sgemm (the widening is O(MK + KN) against O(MNK) for the
// product), which wins where vdpbf16ps issues slower than the fp32 FMA, or widened as
// they are packed for kiri's own fp32 kernel (gemm_packed.cpp). kAuto takes the path
// measured fastest on the shape's class (gemm_lowp_choice.cpp).
#include <omp.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "kiri/kernels/cpu/common.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"

namespace kiri::kernels::cpu {
namespace {

using detail::LowpGemmArgs;

// record_gemm_lowp_calls' list (nullptr: not recording) and the lock its appends take.
std::atomic<std::vector<LowpGemmCall>*> g_recorder{nullptr};
std::mutex g_recorder_mutex;

// set_gemm_lowp_impl's value, or kUnset while KIRI_GEMM_LOWP decides.
constexpr int kUnset = -1;
std::atomic<int> g_forced{kUnset};

// KIRI_GEMM_LOWP parsed once: the setting, or the error to raise on use.
struct EnvSetting {
  LowpGemmImpl impl = LowpGemmImpl::kAuto;
  std::string error;
};
const EnvSetting& env_setting() {
  static const EnvSetting s = [] {
    EnvSetting e;
    const char* v = std::getenv("KIRI_GEMM_LOWP");
    if (!v || !*v) return e;
    try {
      e.impl = parse_gemm_lowp_impl(v);
    } catch (const Error& err) {
      e.error = err.message();
    }
    return e;
  }();
  return s;
}

// Widened panels hold at most this many floats each (1 MiB), so that a panel is still in the
// core's cache when sgemm reads it: with 16 MiB panels every widened float went out to memory
// and back. But a block is at least kMinBlock rows or columns, however long K is (below that
// sgemm's per-call cost showed: 85 x 85 blocks at K 3072 in gpt2-124M). Measured on a CPU
// without bf16 dot products, where every bf16 GEMM runs here (docs/performance.md, "bf16
// where the CPU has no bf16 dot products"). The blocking of M and N changes which sgemm call
// computes a C element, not its K blocks: the golden runs' bf16_via_f32 losses stayed bitwise.
constexpr int64_t kPanelCap = int64_t(1) << 18;
constexpr int64_t kMinBlock = 256;
// K is split only beyond this (C is then re-read once per K block).
constexpr int64_t kMaxKBlock = 4096;

// dst[rows, cols] (fp32, leading dimension cols) = src rows of a 16-bit matrix
// with leading dimension ld, starting at element (r0, c0).
void widen(float* dst, const void* src, DType dt, int64_t ld, int64_t r0, int64_t c0, int64_t rows,
           int64_t cols) {
  const char* base = static_cast<const char*>(src);
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
#pragma omp parallel for schedule(static) if (rows * cols > detail::kMinParallelWork && \
                                              !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r)
    detail::to_f32(dst + r * cols, base + ((r0 + r) * ld + c0) * es, dt, cols);
}

// The reverse for C: rows of fp32 into a 16-bit matrix, rounded; with add, each row is added
// into C's row first (in fp32, rounded once).
void narrow(void* dst, DType dt, int64_t ld, int64_t r0, int64_t c0, const float* src, int64_t rows,
            int64_t cols, bool add = false) {
  char* base = static_cast<char*>(dst);
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
#pragma omp parallel for schedule(static) if (rows * cols > detail::kMinParallelWork && \
                                              !omp_in_parallel())
  for (int64_t r = 0; r < rows; ++r) {
    void* row = base + ((r0 + r) * ld + c0) * es;
    if (add)
      detail::add_f32_into(row, dt, src + r * cols, cols);
    else
      detail::from_f32(row, dt, src + r * cols, cols);
  }
}

// Per thread (the caller's, and each OpenMP thread's on the block-parallel path), reused
// across calls (grows to the largest panel seen).
struct Scratch {
  std::vector<float> a, b, c;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

float* sized(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// op(A) rows [m0, m0+mr) x columns [k0, k0+kr), widened in A's own layout.
const float* widen_a(const LowpGemmArgs& g, int64_t m0, int64_t mr, int64_t k0, int64_t kr) {
  float* a = sized(scratch().a, mr * kr);
  if (g.trans_a) {
    widen(a, g.A, g.ab, g.lda, k0, m0, kr, mr);  // stored [K, M]: [kr, mr]
  } else {
    widen(a, g.A, g.ab, g.lda, m0, k0, mr, kr);  // stored [M, K]: [mr, kr]
  }
  return a;
}

const float* widen_b(const LowpGemmArgs& g, int64_t k0, int64_t kr, int64_t n0, int64_t nr) {
  float* b = sized(scratch().b, kr * nr);
  if (g.trans_b) {
    widen(b, g.B, g.ab, g.ldb, n0, k0, nr, kr);  // stored [N, K]: [nr, kr]
  } else {
    widen(b, g.B, g.ab, g.ldb, k0, n0, kr, nr);  // stored [K, N]: [kr, nr]
  }
  return b;
}

// Panels widened once for several C blocks: op(A)'s rows [m0, m0+mr) or op(B)'s columns
// [n0, n0+nr) over all of K (when K is one block); nullptr: widened per block.
struct Widened {
  const float* a = nullptr;
  const float* b = nullptr;
};

// One C block [m0, m0+mr) x [n0, n0+nr) over all of K, in K blocks of kb.
void block_via_f32(const LowpGemmArgs& g, int64_t m0, int64_t mr, int64_t n0, int64_t nr,
                   int64_t kb, Widened w) {
  const bool c32 = g.c_dtype == DType::kF32;
  // A 16-bit C accumulated in one K block (the weight gradients' dW += x^T dy): the product
  // into the panel, then added into C as C is rounded (one pass over C), not C widened into
  // the panel, accumulated by sgemm and narrowed (two). sgemm adds beta C to its finished sum,
  // so each element is round(C + sum) either way, the same bits (the golden runs' bf16_via_f32
  // case). Alone, 0-5% faster on gpt2-124M's and tiny's weight gradients at 1 thread.
  const bool add_into_c = !c32 && g.beta == 1.0f && kb == g.K;
  float* c = nullptr;
  int64_t ldc = g.ldc;
  if (c32) {
    c = static_cast<float*>(g.C) + m0 * g.ldc + n0;
  } else {
    c = sized(scratch().c, mr * nr);
    ldc = nr;
    if (g.beta != 0.0f && !add_into_c) widen(c, g.C, g.c_dtype, g.ldc, m0, n0, mr, nr);
  }
  for (int64_t k0 = 0; k0 < g.K; k0 += kb) {
    const int64_t kr = std::min(kb, g.K - k0);
    const float* a = w.a ? w.a : widen_a(g, m0, mr, k0, kr);
    const float* b = w.b ? w.b : widen_b(g, k0, kr, n0, nr);
    const float beta = add_into_c ? 0.0f : k0 == 0 ? g.beta : 1.0f;
    gemm<float>(g.trans_a, g.trans_b, mr, nr, kr, g.alpha, a, g.trans_a ? mr : kr, b,
                g.trans_b ? kr : nr, beta, c, ldc);
  }
  if (!c32) narrow(g.C, g.c_dtype, g.ldc, m0, n0, c, mr, nr, add_into_c);
}

// K in several blocks, an fp32 C and one column block: the K blocks outermost, so that each
// B panel is widened once, not once per row block. Every C block gets the same sgemm calls in
// the same K order as block_via_f32 would make (C accumulates in place), so the same bits.
void k_outer_via_f32(const LowpGemmArgs& g, int64_t kb, int64_t mb) {
  for (int64_t k0 = 0; k0 < g.K; k0 += kb) {
    const int64_t kr = std::min(kb, g.K - k0);
    const float* b = widen_b(g, k0, kr, 0, g.N);
    const float beta = k0 == 0 ? g.beta : 1.0f;
    for (int64_t m0 = 0; m0 < g.M; m0 += mb) {
      const int64_t mr = std::min(mb, g.M - m0);
      const float* a = widen_a(g, m0, mr, k0, kr);
      gemm<float>(g.trans_a, g.trans_b, mr, g.N, kr, g.alpha, a, g.trans_a ? mr : kr, b,
                  g.trans_b ? kr : g.N, beta, static_cast<float*>(g.C) + m0 * g.ldc, g.ldc);
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// How gemm_lowp_via_f32 cuts C and K: blocks of mb rows and nb columns, K in blocks of kb.
struct Blocking {
  int64_t mb, nb, kb;
};

Blocking blocking(const LowpGemmArgs& g) {
  // C's columns fit one panel beside kMinBlock rows or K: N is not split (below).
  const bool narrow_n = g.N <= kPanelCap / kMinBlock;
  int64_t kb = g.K <= kMaxKBlock ? g.K : kMaxKBlock / 4;
  // An fp32 C of few columns whose B does not fit one panel (the LM head's input gradient:
  // N = C, K = V; a layer's forward or input gradient into C columns): K blocks short enough
  // that a B panel holds all of N, so k_outer_via_f32 widens each B element once and each A
  // element once. With N cut into 256-column blocks instead, every A panel was widened (and
  // packed by sgemm) once per column block: 1.25x fp32's time on gpt2-124M's head against
  // 1.1x, 1.18x on its layers' input gradients against 1.10x (docs/performance.md, "Blocking
  // the widened panels"). The K blocks are of equal size, so that none is a short remainder.
  if (narrow_n && g.c_dtype == DType::kF32 && g.K * g.N > kPanelCap) {
    kb = std::min(kb, std::clamp(kPanelCap / g.N, kMinBlock, kMaxKBlock / 4));
    kb = ceil_div(g.K, ceil_div(g.K, kb));
  }
  int64_t mb = std::min(g.M, std::max(kMinBlock, kPanelCap / kb));
  int64_t nb = std::min(g.N, std::max(kMinBlock, kPanelCap / kb));
  if (g.c_dtype != DType::kF32) {
    // A 16-bit C is widened and narrowed a block at a time, so its block is a panel too. With
    // few columns, rows of all of N (the LM head's weight gradient: M = V, N = C), so that B
    // is widened once and sgemm packs each A panel once, not once per column block.
    // (The rows are also capped by K's panel: tiny's c_proj weight gradient, K = 1024 tokens
    // and N = 256, took 1.2x as long with A panels of 4 MiB.)
    if (narrow_n) mb = std::min(g.M, std::max(kMinBlock, kPanelCap / std::max(g.N, kb)));
    nb = std::min(nb, std::max(kMinBlock, kPanelCap / mb));
  }
  return {mb, nb, kb};
}

// The columns [n0, n0 + nr) of g: a GEMM of its own on the same A.
LowpGemmArgs column_slice(const LowpGemmArgs& g, int64_t n0, int64_t nr) {
  LowpGemmArgs s = g;
  const int64_t es = static_cast<int64_t>(dtype_size(g.ab));
  s.B = static_cast<const char*>(g.B) + (g.trans_b ? n0 * g.ldb : n0) * es;
  s.C = static_cast<float*>(g.C) + n0;  // k_outer's C is fp32
  s.N = nr;
  return s;
}

// More than one OpenMP thread and at least as many C blocks: each C block (or, for k_outer,
// each thread's share of the columns) is one thread's, widened into its own panels and
// multiplied by a one-thread sgemm (oneDNN runs serially inside a parallel region). The threads
// stream their own operands from memory at once, and a block costs no barriers; splitting every
// widening and every sgemm call over the threads had 4 barriers per block and sgemm calls too
// small for two threads. The K blocks and their order are the serial path's, but oneDNN may
// sum an element differently in a block of other sizes: a result is deterministic for a thread
// count, not bitwise the same across counts.
bool via_f32_parallel(const LowpGemmArgs& g, Blocking b, int threads) {
  const bool one_k = b.kb == g.K;
  if (!one_k && b.nb == g.N && g.c_dtype == DType::kF32) {
    const int64_t nt = ceil_div(ceil_div(g.N, threads), 16) * 16;
    if (ceil_div(g.N, nt) < threads) return false;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t n0 = 0; n0 < g.N; n0 += nt)
      k_outer_via_f32(column_slice(g, n0, std::min(nt, g.N - n0)), b.kb, b.mb);
    return true;
  }
  // Fewer blocks than threads: the serial path, whose widening and sgemm use every thread.
  int64_t bm = ceil_div(g.M, b.mb), bn = ceil_div(g.N, b.nb);
  if (bm * bn < threads) return false;
  // The longer side of the block grid in a multiple of the threads' count, so that no thread
  // waits for another's last block (gpt2-124M's c_attn: 7 column blocks on 2 threads).
  if ((bm * bn) % threads != 0) {
    if (bn >= bm) {
      b.nb = ceil_div(g.N, ceil_div(bn, threads) * threads);
      bn = ceil_div(g.N, b.nb);
    } else {
      b.mb = ceil_div(g.M, ceil_div(bm, threads) * threads);
      bm = ceil_div(g.M, b.mb);
    }
  }
  // With K in one block, an operand that every block shares (A when C has one row of blocks,
  // B when one column) is widened once, by all threads, into the calling thread's panel; the
  // blocks then widen only the other operand, into their own thread's other panel.
  Widened w;
  if (one_k && bm == 1 && bn > 1) w.a = widen_a(g, 0, g.M, 0, g.K);
  if (one_k && bn == 1 && bm > 1) w.b = widen_b(g, 0, g.K, 0, g.N);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < bm * bn; ++i) {
    const int64_t m0 = (i / bn) * b.mb, n0 = (i % bn) * b.nb;
    block_via_f32(g, m0, std::min(b.mb, g.M - m0), n0, std::min(b.nb, g.N - n0), b.kb, w);
  }
  return true;
}

}  // namespace

void detail::gemm_lowp_via_f32(const LowpGemmArgs& g) {
  const Blocking b = blocking(g);
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads > 1 && via_f32_parallel(g, b, threads)) return;
  const bool one_k = b.kb == g.K, one_n = b.nb == g.N;
  if (!one_k && one_n && g.c_dtype == DType::kF32) return k_outer_via_f32(g, b.kb, b.mb);
  // With K in one block, an operand shared by several C blocks is widened once: B when C has
  // one column block (the LM head's dweight: 197 row blocks in tiny), else A's rows for their
  // row of blocks (the LM head's forward: 197 column blocks).
  Widened w;
  if (one_k && one_n) w.b = widen_b(g, 0, g.K, 0, g.N);
  for (int64_t m0 = 0; m0 < g.M; m0 += b.mb) {
    const int64_t mr = std::min(b.mb, g.M - m0);
    w.a = one_k && !one_n ? widen_a(g, m0, mr, 0, g.K) : nullptr;
    for (int64_t n0 = 0; n0 < g.N; n0 += b.nb)
      block_via_f32(g, m0, mr, n0, std::min(b.nb, g.N - n0), b.kb, w);
  }
}

namespace {

// C = round(beta * C) for K == 0 with a 16-bit C (beta 0 clears NaNs).
void scale_c_lowp(int64_t M, int64_t N, float beta, void* C, DType dt, int64_t ldc) {
  std::vector<float> row(static_cast<size_t>(N));
  char* base = static_cast<char*>(C);
  const int64_t es = static_cast<int64_t>(dtype_size(dt));
  for (int64_t i = 0; i < M; ++i) {
    void* r = base + i * ldc * es;
    detail::to_f32(row.data(), r, dt, N);
    for (float& v : row) v = beta == 0.0f ? 0.0f : v * beta;
    detail::from_f32(r, dt, row.data(), N);
  }
}

}  // namespace

void set_gemm_lowp_impl(LowpGemmImpl impl) {
  g_forced.store(static_cast<int>(impl));
}

LowpGemmImpl gemm_lowp_impl() {
  const int forced = g_forced.load();
  if (forced != kUnset) return static_cast<LowpGemmImpl>(forced);
  const EnvSetting& e = env_setting();
  KIRI_CHECK_KIND(kConfig, e.error.empty(), "KIRI_GEMM_LOWP: ", e.error);
  return e.impl;
}

const char* gemm_lowp_impl_name(LowpGemmImpl impl) {
  switch (impl) {
    case LowpGemmImpl::kAuto:
      return "auto";
    case LowpGemmImpl::kOneDnnMatmul:
      return "onednn";
    case LowpGemmImpl::kViaF32:
      return "via_f32";
    case LowpGemmImpl::kPacked:
      return "packed";
  }
  return "?";
}

LowpGemmImpl parse_gemm_lowp_impl(const std::string& name) {
  for (LowpGemmImpl impl : {LowpGemmImpl::kAuto, LowpGemmImpl::kOneDnnMatmul, LowpGemmImpl::kViaF32,
                            LowpGemmImpl::kPacked})
    if (name == gemm_lowp_impl_name(impl)) return impl;
  KIRI_RAISE(kConfig,
             "the low-precision GEMM path must be auto | onednn | via_f32 | packed, got \"", name,
             "\"");
}

const std::string& gemm_lowp_onednn_kernel(DType ab) {
  KIRI_CHECK(detail::is_lowp(ab), "gemm_lowp_onednn_kernel: dtype must be BF16 or F16, got ",
             dtype_name(ab));
  return detail::onednn_lowp_kernel(ab);
}

bool gemm_lowp_available(LowpGemmImpl impl, DType ab) {
  KIRI_CHECK(detail::is_lowp(ab), "gemm_lowp_available: dtype must be BF16 or F16, got ",
             dtype_name(ab));
  if (impl == LowpGemmImpl::kPacked) return detail::gemm_lowp_packed_supported();
  return impl != LowpGemmImpl::kOneDnnMatmul || !detail::onednn_lowp_kernel(ab).empty();
}

namespace {
// kAuto's table: the FLOPs of one pass over its shapes and the shapes that each path computes
// fastest, indexed by LowpGemmImpl.
struct AutoSplit {
  double flop[4] = {0, 0, 0, 0};
  int shapes[4] = {0, 0, 0, 0};
  int all = 0;
  LowpGemmImpl most() const {  // the path of most of the FLOPs (via_f32 on a tie)
    LowpGemmImpl best = LowpGemmImpl::kViaF32;
    for (LowpGemmImpl p : {LowpGemmImpl::kPacked, LowpGemmImpl::kOneDnnMatmul})
      if (flop[static_cast<int>(p)] > flop[static_cast<int>(best)]) best = p;
    return best;
  }
};
AutoSplit auto_split(DType ab) {
  AutoSplit s;
  for (const LowpGemmRate& r : gemm_lowp_rates(ab).shapes) {
    const int p = static_cast<int>(r.faster());
    s.flop[p] += 2.0 * static_cast<double>(r.shape.M) * r.shape.N * r.shape.K;
    ++s.shapes[p];
    ++s.all;
  }
  return s;
}

bool any_but_via_f32(DType ab) {
  return gemm_lowp_available(LowpGemmImpl::kOneDnnMatmul, ab) ||
         gemm_lowp_available(LowpGemmImpl::kPacked, ab);
}

std::string path_name(LowpGemmImpl path, DType ab) {
  if (path != LowpGemmImpl::kOneDnnMatmul) return gemm_lowp_impl_name(path);
  return std::string("onednn (") + detail::onednn_lowp_kernel(ab) + ")";
}
}  // namespace

LowpGemmImpl gemm_lowp_path(DType ab) {
  const LowpGemmImpl impl = gemm_lowp_impl();
  if (impl == LowpGemmImpl::kAuto)
    return any_but_via_f32(ab) ? auto_split(ab).most() : LowpGemmImpl::kViaF32;
  return gemm_lowp_available(impl, ab) ? impl : LowpGemmImpl::kViaF32;
}

std::string gemm_lowp_path_description(DType ab) {
  const LowpGemmImpl path = gemm_lowp_path(ab);
  if (gemm_lowp_impl() != LowpGemmImpl::kAuto || !any_but_via_f32(ab)) return path_name(path, ab);
  // "packed on 4 of 6 shapes, via_f32 on 2": the paths that take a shape, most FLOPs first.
  const AutoSplit s = auto_split(ab);
  std::string out = path_name(path, ab);
  if (s.shapes[static_cast<int>(path)] == s.all) return out;
  out += " on " + std::to_string(s.shapes[static_cast<int>(path)]) + " of " +
         std::to_string(s.all) + " shapes";
  for (LowpGemmImpl p : {LowpGemmImpl::kPacked, LowpGemmImpl::kViaF32, LowpGemmImpl::kOneDnnMatmul})
    if (p != path && s.shapes[static_cast<int>(p)] > 0)
      out += ", " + path_name(p, ab) + " on " + std::to_string(s.shapes[static_cast<int>(p)]);
  return out;
}

void gemm_lowp(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C,
               DType c_dtype, int64_t ldc) {
  KIRI_CHECK(detail::is_lowp(ab), "gemm_lowp: A and B must be BF16 or F16, got ", dtype_name(ab));
  KIRI_CHECK(c_dtype == DType::kF32 || c_dtype == ab, "gemm_lowp: C must be F32 or ",
             dtype_name(ab), ", got ", dtype_name(c_dtype));
  detail::check_gemm_args("gemm_lowp", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  if (g_recorder.load(std::memory_order_relaxed)) {  // one load when nobody records
    const std::lock_guard<std::mutex> lock(g_recorder_mutex);
    if (std::vector<LowpGemmCall>* rec = g_recorder.load(std::memory_order_relaxed))
      rec->push_back({ab, trans_a, trans_b, M, N, K, beta, c_dtype});
  }
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (c_dtype == DType::kF32) return detail::scale_c(M, N, beta, static_cast<float*>(C), ldc);
    return scale_c_lowp(M, N, beta, C, c_dtype, ldc);
  }
  const LowpGemmArgs g{ab, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, c_dtype, ldc};
  LowpGemmImpl impl = gemm_lowp_impl();
  if (impl == LowpGemmImpl::kAuto) impl = detail::auto_path(ab, trans_a, trans_b, M, N, K);
  if (impl == LowpGemmImpl::kOneDnnMatmul && detail::gemm_lowp_onednn(g)) return;
  if (impl == LowpGemmImpl::kPacked && detail::gemm_lowp_packed(g)) return;
  detail::gemm_lowp_via_f32(g);
}

void record_gemm_lowp_calls(std::vector<LowpGemmCall>* into) {
  const std::lock_guard<std::mutex> lock(g_recorder_mutex);  // no append is under way
  g_recorder.store(into, std::memory_order_relaxed);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_lowp(DType::kBF16, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, DType::kF32,
            ldc);
}

}  // namespace kiri::kernels::cpu
