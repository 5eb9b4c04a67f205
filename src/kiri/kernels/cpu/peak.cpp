#include "kiri/kernels/cpu/peak.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiri::kernels::cpu {

namespace {

// Read through volatiles so that the compiler can neither fold the chains
// nor drop them: a = b = 0.5 keeps every fp32/fp16 chain at c -> c/2 + 1/2
// (converging to 1: no overflow, no denormals).
volatile float g_seed[2] = {0.5f, 0.5f};
volatile uint16_t g_seed_f16 = 0x3800;  // 0.5 in IEEE half
volatile float g_sink = 0;

using Kernel = void (*)(int64_t iters, float a, float b, float* out);

struct Candidate {
  const char* instruction;
  Kernel run;
  double flops_per_iter;
};

#define KIRI_REP16(X) \
  X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define KIRI_REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

#if defined(__x86_64__)
// Two lanes are enough to keep the chains alive (GCC 12's
// _mm512_reduce_add_ps trips -Wuninitialized).
__attribute__((target("avx512f"))) float first_and_last(__m512 s) {
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  return lanes[0] + lanes[15];
}

// 16 independent chains: SPR/Zen 4 have 2 FMA ports of latency 4, so 8 are
// needed; 16 (+2 operands) still fit in the 32 zmm registers.
__attribute__((target("avx512f"))) void fma_avx512_ps(int64_t iters, float a, float b, float* out) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
#define DECL(i) __m512 c##i = _mm512_set1_ps(float(i));
  KIRI_REP16(DECL)
#undef DECL
  for (int64_t n = 0; n < iters; ++n) {
#define STEP(i) c##i = _mm512_fmadd_ps(c##i, va, vb);
    KIRI_REP16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
  KIRI_REP16(SUM)
#undef SUM
  out[0] = first_and_last(s);
}

// 12 chains of ymm (16 registers): covers latency 4-5 x 2 ports.
__attribute__((target("avx2,fma"))) void fma_avx2_ps(int64_t iters, float a, float b, float* out) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
#define DECL(i) __m256 c##i = _mm256_set1_ps(float(i));
  KIRI_REP12(DECL)
#undef DECL
  for (int64_t n = 0; n < iters; ++n) {
#define STEP(i) c##i = _mm256_fmadd_ps(c##i, va, vb);
    KIRI_REP12(STEP)
#undef STEP
  }
  __m256 s = _mm256_setzero_ps();
#define SUM(i) s = _mm256_add_ps(s, c##i);
  KIRI_REP12(SUM)
#undef SUM
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  out[0] = lanes[0] + lanes[7];
}

// Without FMA: a multiply and an add per lane (2 FLOPs), 12 chains of xmm.
void mul_add_sse_ps(int64_t iters, float a, float b, float* out) {
  const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b);
#define DECL(i) __m128 c##i = _mm_set1_ps(float(i));
  KIRI_REP12(DECL)
#undef DECL
  for (int64_t n = 0; n < iters; ++n) {
#define STEP(i) c##i = _mm_add_ps(_mm_mul_ps(c##i, va), vb);
    KIRI_REP12(STEP)
#undef STEP
  }
  __m128 s = _mm_setzero_ps();
#define SUM(i) s = _mm_add_ps(s, c##i);
  KIRI_REP12(SUM)
#undef SUM
  out[0] = _mm_cvtss_f32(s);
}

// vdpbf16ps: per fp32 lane c += a0*b0 + a1*b1 (4 FLOPs), 16 lanes. The chains
// grow by 1/2 per step (no overflow in the short runs).
__attribute__((target("avx512f,avx512bf16"))) void dp_avx512_bf16(int64_t iters, float a, float b,
                                                                  float* out) {
  const __m512bh va = _mm512_cvtne2ps_pbh(_mm512_set1_ps(a), _mm512_set1_ps(a));
  const __m512bh vb = _mm512_cvtne2ps_pbh(_mm512_set1_ps(b), _mm512_set1_ps(b));
#define DECL(i) __m512 c##i = _mm512_set1_ps(float(i));
  KIRI_REP16(DECL)
#undef DECL
  for (int64_t n = 0; n < iters; ++n) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, va, vb);
    KIRI_REP16(STEP)
#undef STEP
  }
  __m512 s = _mm512_setzero_ps();
#define SUM(i) s = _mm512_add_ps(s, c##i);
  KIRI_REP16(SUM)
#undef SUM
  out[0] = first_and_last(s);
}

// vfmadd231ph: 32 fp16 lanes, 2 FLOPs each.
__attribute__((target("avx512f,avx512fp16"))) void fma_avx512_ph(int64_t iters, float, float,
                                                                 float* out) {
  const __m512h v = _mm512_castsi512_ph(_mm512_set1_epi16(static_cast<short>(g_seed_f16)));
#define DECL(i) __m512h c##i = _mm512_castsi512_ph(_mm512_set1_epi16(short(0x3c00 + i)));
  KIRI_REP16(DECL)
#undef DECL
  for (int64_t n = 0; n < iters; ++n) {
#define STEP(i) c##i = _mm512_fmadd_ph(c##i, v, v);
    KIRI_REP16(STEP)
#undef STEP
  }
  __m512h s = c0;
#define SUM(i) s = _mm512_add_ph(s, c##i);
  KIRI_REP16(SUM)
#undef SUM
  int32_t lanes[16];
  _mm512_storeu_si512(lanes, _mm512_castph_si512(s));
  out[0] = static_cast<float>(lanes[0] ^ lanes[15]);
}

// AMX (unverified on the development machine, which has no AMX): four 16x16
// fp32 accumulator tiles, each += a 16x32 bf16 tile times a 32x16 one
// (2*16*16*32 FLOPs per tdpbf16ps), from two A and two B tiles.
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

__attribute__((target("amx-tile,amx-bf16"))) void amx_bf16(int64_t iters, float, float,
                                                           float* out) {
  TileConfig cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  alignas(64) uint16_t ab[16 * 32];
  alignas(64) float c[16 * 16] = {};
  std::fill(std::begin(ab), std::end(ab), uint16_t{0x3a80});  // bf16 ~1e-3: small sums
  _tile_loadconfig(&cfg);
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c, 64);
  _tile_loadd(2, c, 64);
  _tile_loadd(3, c, 64);
  _tile_loadd(4, ab, 64);
  _tile_loadd(5, ab, 64);
  _tile_loadd(6, ab, 64);
  _tile_loadd(7, ab, 64);
  for (int64_t n = 0; n < iters; ++n) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_release();
  out[0] = c[0];
}

bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}

// Linux keeps the AMX tile data state off until a process asks for it.
bool amx_permitted() {
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif  // __x86_64__

// Plain fp32 chains for CPUs this file has no vector code for.
void fma_scalar(int64_t iters, float a, float b, float* out) {
  float c[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t n = 0; n < iters; ++n)
    for (float& x : c) x = x * a + b;
  out[0] = c[0] + c[7];
}

struct Features {
  bool sse = false, avx2_fma = false, avx512f = false, avx512_bf16 = false, avx512_fp16 = false,
       amx_bf16 = false;
};

Features detect() {
  Features f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.sse = true;  // x86-64 baseline
  // libgcc checks XCR0 here too: the OS saves the ymm/zmm state.
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  // CPUID.(7,1):EAX[5] AVX512_BF16; (7,0):EDX[23] AVX512_FP16, EDX[22] AMX-BF16, EDX[24] AMX-TILE.
  f.avx512_bf16 = f.avx512f && cpuid_bit(7, 1, 0, 5);
  f.avx512_fp16 = f.avx512f && cpuid_bit(7, 0, 3, 23);
  f.amx_bf16 = cpuid_bit(7, 0, 3, 22) && cpuid_bit(7, 0, 3, 24) && amx_permitted();
#endif
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

double run_seconds(const Candidate& c, int64_t iters) {
  float out[1] = {0};
  const float a = g_seed[0], b = g_seed[1];
  Timer t;
  c.run(iters, a, b, out);
  const double s = t.seconds();
  g_sink = out[0];
  return s;
}

// FLOP/s of one candidate: iterations doubled until a run takes 50 us, then
// sized to ~100 us, the best of `repeats` after 2 ms of warm-up (the vector
// units and their clock). Runs this short fit between preemptions and the
// host's slow spells on a loaded machine: the best of 200 (20 ms) varies by
// ~1%, where the best of 20 runs of 2 ms varied by up to 10%.
double best_rate(const Candidate& c, int repeats) {
  int64_t iters = 16;
  double s = run_seconds(c, iters);
  while (s < 5e-5 && iters < (int64_t{1} << 40)) {
    iters *= 2;
    s = run_seconds(c, iters);
  }
  iters = std::max<int64_t>(iters, static_cast<int64_t>(static_cast<double>(iters) * 1e-4 / s));
  for (int w = 0; w < 20; ++w) run_seconds(c, iters);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) best = std::min(best, run_seconds(c, iters));
  return c.flops_per_iter * static_cast<double>(iters) / best;
}

std::vector<Candidate> fp32_candidates() {
  const Features& f = features();
#if defined(__x86_64__)
  if (f.avx512f) return {{"avx512 vfmadd231ps", fma_avx512_ps, 16 * 16 * 2}};
  if (f.avx2_fma) return {{"avx2 vfmadd231ps", fma_avx2_ps, 12 * 8 * 2}};
  if (f.sse) return {{"sse mulps+addps", mul_add_sse_ps, 12 * 4 * 2}};
#endif
  (void)f;
  return {{"scalar fp32", fma_scalar, 8 * 2}};
}

std::vector<Candidate> candidates(DType dtype) {
  std::vector<Candidate> out = fp32_candidates();
  [[maybe_unused]] const Features& f = features();
  switch (dtype) {
    case DType::kF32:
      break;
    case DType::kBF16:
#if defined(__x86_64__)
      if (f.avx512_bf16) out.push_back({"avx512_bf16 vdpbf16ps", dp_avx512_bf16, 16 * 16 * 4});
      if (f.amx_bf16) out.push_back({"amx tdpbf16ps", amx_bf16, 4.0 * 2 * 16 * 16 * 32});
#endif
      break;
    case DType::kF16:
#if defined(__x86_64__)
      if (f.avx512_fp16) out.push_back({"avx512_fp16 vfmadd231ph", fma_avx512_ph, 16 * 32 * 2});
#endif
      break;
    default:
      KIRI_RAISE(kConfig, "no peak FLOP/s for dtype ", dtype_name(dtype),
                 " (measured: fp32, bf16, fp16)");
  }
  return out;
}

}  // namespace

std::vector<CorePeak> measure_core_instructions(DType dtype, int repeats) {
  KIRI_CHECK_KIND(kConfig, repeats >= 1, "measure_core_peak: repeats must be >= 1, got ", repeats);
  std::vector<CorePeak> out;
  for (const Candidate& c : candidates(dtype))
    out.push_back({best_rate(c, repeats), c.instruction});
  return out;
}

CorePeak measure_core_peak(DType dtype, int repeats) {
  CorePeak best;
  for (const CorePeak& p : measure_core_instructions(dtype, repeats))
    if (p.flops > best.flops) best = p;
  return best;
}

const CorePeak& core_peak(DType dtype) {
  static std::mutex mu;
  static CorePeak cache[3];
  static bool done[3] = {false, false, false};
  const int i = dtype == DType::kF32    ? 0
                : dtype == DType::kBF16 ? 1
                : dtype == DType::kF16  ? 2
                                        : -1;
  if (i < 0) candidates(dtype);  // raises, naming the dtype
  std::lock_guard<std::mutex> lock(mu);
  if (!done[i]) {
    cache[i] = measure_core_peak(dtype);
    done[i] = true;
  }
  return cache[i];
}

double peak_flops(DType dtype, int threads) {
  KIRI_CHECK_KIND(kConfig, threads >= 1, "peak_flops: threads must be >= 1, got ", threads);
  return core_peak(dtype).flops * threads;
}

std::string peak_cpu_features() {
  const Features& f = features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(f.avx2_fma, "avx2 fma");
  add(f.avx512f, "avx512f");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  return s.empty() ? "none" : s;
}

}  // namespace kiri::kernels::cpu
