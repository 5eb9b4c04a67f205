// kAuto's path for gemm_lowp, chosen by measurement. Which path is faster is a property of
// the CPU, not of its ISA's name: vdpbf16ps issues at the fp32 FMA's rate on some CPUs
// (AMD Zen 4/5, recent Intel) and at a quarter of it on others, and AMX is faster still.
// So the paths are timed on GEMM shapes and each shape class takes the fastest. A shape
// class is a pair of transposes and the timed shape nearest in log size (M, N and K).
// The rates are kept in a small file per CPU model, oneDNN version and revision of kiri's
// via_f32 path, so that a machine measures each shape once and every later process (and
// every rank) takes the same path. A rate timed while other work held the cores (a build
// beside it, ctest's parallel tests) is kept, marked by the share of the cores its threads
// got, and timed again by the first process that finds the cores free: under such a load
// 2-thread via_f32, whose barriers wait for the slowest thread, measured 6 GFLOP/s against
// oneDNN's 14, and a file that kept that sent shapes to the slower path for good.
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "kiri/base/timer.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/cpu/lowp.h"
#include "kiri/kernels/cpu/ops.h"

namespace fs = std::filesystem;

namespace kiri::kernels::cpu {
namespace {

using detail::LowpGemmArgs;

std::mutex g_mu;
// set_gemm_lowp_rates' table per dtype (a training run's own shapes), used at any thread
// count; else the default shapes' table measured on first use, per dtype and thread count.
std::map<DType, std::shared_ptr<const LowpGemmRates>> g_installed;
std::map<std::pair<DType, int>, std::shared_ptr<const LowpGemmRates>> g_defaults;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown cpu";
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + "+" + v->hash;
}

// kiri's own via_f32 path, by revision: a file measured before a change to it holds rates
// that path no longer has (revision 2, 1 MiB panels, ran 1.2x faster in a tiny bf16 step on a
// CPU without bf16 dot products; revision 3 gives threads whole C blocks and adds a product
// into a 16-bit C as it rounds), so a new revision measures again. Revision 4 adds the packed
// path's rate to each line; revision 5 brings the packed path and vector widening to CPUs with
// AVX2 but no AVX-512, whose files held no packed rate and a scalar via_f32's.
constexpr int kViaF32Revision = 5;

// The machine's identity in the cache: a file per CPU model, oneDNN version and via_f32
// revision.
const std::string& machine_key() {
  static const std::string key = cpu_model() + ", oneDNN " + onednn_version() + ", via_f32 r" +
                                 std::to_string(kViaF32Revision);
  return key;
}

std::string cache_file_name() {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the machine's identity
  for (unsigned char c : machine_key()) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("gemm_lowp-") + hex + ".txt";
}

// One line of the cache file: "<dtype> <threads> <ta> <tb> <M> <N> <K> <via_f32> <onednn>
// <cpu_share> <packed>".
struct CacheLine {
  DType ab;
  int threads;
  LowpGemmRate rate;
};

bool same_key(const CacheLine& l, DType ab, int threads, const LowpGemmShape& s) {
  const LowpGemmShape& c = l.rate.shape;
  return l.ab == ab && l.threads == threads && c.trans_a == s.trans_a && c.trans_b == s.trans_b &&
         c.M == s.M && c.N == s.N && c.K == s.K;
}

// The lines of `path` that parse; a damaged line is dropped (and the file rewritten without
// it on the next save), since a rate can always be measured again.
std::vector<CacheLine> read_cache(const std::string& path) {
  std::vector<CacheLine> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    std::string dt;
    CacheLine l{};
    int ta = 0, tb = 0;
    LowpGemmShape& s = l.rate.shape;
    if (!(f >> dt >> l.threads >> ta >> tb >> s.M >> s.N >> s.K >> l.rate.via_f32 >>
          l.rate.onednn >> l.rate.cpu_share >> l.rate.packed))
      continue;
    if (!(l.rate.cpu_share >= 0 && l.rate.cpu_share <= 1.5)) l.rate.cpu_share = 0;
    if ((dt != "BF16" && dt != "F16") || l.threads < 1 || s.M < 1 || s.N < 1 || s.K < 1 ||
        !(l.rate.via_f32 > 0) || !(l.rate.onednn >= 0) || !(l.rate.packed >= 0) ||
        (ta != 0 && ta != 1) || (tb != 0 && tb != 1))
      continue;
    l.ab = dt == "BF16" ? DType::kBF16 : DType::kF16;
    s.trans_a = ta == 1;
    s.trans_b = tb == 1;
    out.push_back(l);
  }
  return out;
}

// Writes `lines` to `path` through a temporary file and a rename, so that a reader sees the
// old file or the new one, never half of one. "" or the reason it could not.
std::string write_cache(const std::string& path, const std::vector<CacheLine>& lines) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return "cannot create " + fs::path(path).parent_path().string() + ": " + ec.message();
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << "# kiri: gemm_lowp's measured rates (FLOP/s) on " << machine_key() << "\n"
        << "# dtype threads trans_a trans_b M N K via_f32 onednn cpu_share packed\n";
    char buf[64];
    for (const CacheLine& l : lines) {
      const LowpGemmShape& s = l.rate.shape;
      out << dtype_name(l.ab) << ' ' << l.threads << ' ' << s.trans_a << ' ' << s.trans_b << ' '
          << s.M << ' ' << s.N << ' ' << s.K;
      std::snprintf(buf, sizeof buf, " %.6g %.6g %.3f %.6g\n", l.rate.via_f32, l.rate.onednn,
                    l.rate.cpu_share, l.rate.packed);
      out << buf;
    }
    out.flush();
    if (!out) {
      fs::remove(tmp, ec);
      return "cannot write " + tmp;
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return "cannot write " + path + ": " + ec.message();
  }
  return "";
}

// 16-bit operands of a shape, op(A)[M,K] and op(B)[K,N], and its C: fp32 and written, or
// (c_lowp) 16-bit and accumulated into. The values (0.5 and 0.25) keep every product exact
// and far from subnormals.
struct Operands {
  std::vector<uint16_t> a, b, c16;
  std::vector<float> c;
  LowpGemmArgs args;
  Operands(DType ab, const LowpGemmShape& s)
      : a(static_cast<size_t>(s.M * s.K), ab == DType::kBF16 ? 0x3F00 : 0x3800),
        b(static_cast<size_t>(s.K * s.N), ab == DType::kBF16 ? 0x3E80 : 0x3400),
        c16(static_cast<size_t>(s.c_lowp ? s.M * s.N : 0)),
        c(static_cast<size_t>(s.c_lowp ? 0 : s.M * s.N)),
        args{ab,
             s.trans_a,
             s.trans_b,
             s.M,
             s.N,
             s.K,
             1.0f,
             a.data(),
             s.trans_a ? s.M : s.K,
             b.data(),
             s.trans_b ? s.K : s.N,
             s.c_lowp ? 1.0f : 0.0f,
             s.c_lowp ? static_cast<void*>(c16.data()) : static_cast<void*>(c.data()),
             s.c_lowp ? ab : DType::kF32,
             s.N} {}
};

// This thread's time on a core and waiting for one (runnable, queued behind other work), in
// ns, from the scheduler (/proc/thread-self/schedstat); false where the kernel does not say.
bool thread_sched_ns(double& on_cpu, double& waiting) {
  std::ifstream in("/proc/thread-self/schedstat");
  return static_cast<bool>(in >> on_cpu >> waiting);
}

}  // namespace

namespace detail {

double cpu_share_while(const std::function<void()>& f) {
  const int n = omp_get_max_threads();
  std::vector<double> cpu(static_cast<size_t>(n), 0), wait(static_cast<size_t>(n), 0);
  std::vector<char> known(static_cast<size_t>(n), 1);
  auto read = [&](double sign) {
#pragma omp parallel num_threads(n)
    {
      const size_t t = static_cast<size_t>(omp_get_thread_num());
      double c = 0, w = 0;
      if (thread_sched_ns(c, w)) {
        cpu[t] += sign * c;
        wait[t] += sign * w;
      } else {
        known[t] = 0;
      }
    }
  };
  read(-1);
  f();
  read(+1);
  double on = 0, queued = 0;
  for (int t = 0; t < n; ++t) {
    if (!known[static_cast<size_t>(t)]) return 1;
    on += cpu[static_cast<size_t>(t)];
    queued += wait[static_cast<size_t>(t)];
  }
  return on + queued > 0 ? on / (on + queued) : 1;
}

double cpu_share_now() {
  // The best of three 20 ms probes: a kernel thread's wakeup can take a millisecond of one
  // probe (5 ms probes on an idle VM here read 0.75-0.87 now and then); other work that
  // holds the cores holds them in all three.
  double best = 0;
  for (int probe = 0; probe < 3 && best < kFreeCpuShare; ++probe)
    best = std::max(best, cpu_share_while([] {
#pragma omp parallel
                      {
                        Timer t;
                        volatile double x = 1;
                        while (t.seconds() < 0.02) x = x * 1.0000001 + 1e-9;
                      }
                    }));
  return best;
}

// The best of a few timed calls of each after an untimed one (oneDNN makes its primitive
// there): at least 3 rounds and 50 ms, at most 10. The calls alternate, so that other work on
// the cores slows every path alike: timed one path after the other, a load that came and went
// in between once sent shapes to the slower path. A path whose best is over 1.5x the fastest
// path's is out of the running and not called again, so that long calls (the LM head's, 0.15 s
// on the fast paths and 0.7 s on oneDNN's reference kernel) still get 3 rounds: timed once
// each, rates 10% apart from run to run sent the head to either path.
std::vector<double> best_seconds_interleaved(const std::vector<std::function<void()>>& paths) {
  for (const auto& f : paths) f();
  std::vector<double> best(paths.size(), 1e30);
  Timer all;
  for (int round = 0; round < 10; ++round) {
    const double fastest = *std::min_element(best.begin(), best.end());
    for (size_t i = 0; i < paths.size(); ++i) {
      if (best[i] > 1.5 * fastest) continue;
      Timer t;
      paths[i]();
      best[i] = std::min(best[i], t.seconds());
    }
    if (round >= 2 && all.seconds() > 0.05) break;
  }
  return best;
}

}  // namespace detail

namespace {

LowpGemmRate measure_shape(DType ab, const LowpGemmShape& s) {
  Operands ops(ab, s);
  const double flop = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * s.K;
  LowpGemmRate r{s, 0, 0, 1};
  std::vector<std::function<void()>> paths = {[&] { detail::gemm_lowp_via_f32(ops.args); }};
  std::vector<double*> rates = {&r.via_f32};
  if (!detail::onednn_lowp_kernel(ab).empty()) {
    paths.push_back([&] { detail::gemm_lowp_onednn(ops.args); });
    rates.push_back(&r.onednn);
  }
  if (detail::gemm_lowp_packed_takes(ops.args)) {
    paths.push_back([&] { detail::gemm_lowp_packed(ops.args); });
    rates.push_back(&r.packed);
  }
  std::vector<double> seconds;
  r.cpu_share = detail::cpu_share_while([&] { seconds = detail::best_seconds_interleaved(paths); });
  for (size_t i = 0; i < rates.size(); ++i) *rates[i] = flop / seconds[i];
  return r;
}

// The default shapes for a process that installed none (a unit test, `kiri bench`'s kernels):
// a 256-row micro-batch through a 1024-wide layer, forward, dinput and dweight.
std::vector<LowpGemmShape> default_shapes() {
  return linear_gemm_shapes(256, 256, 1024, false, "default");
}

double log_distance(const LowpGemmShape& a, int64_t M, int64_t N, int64_t K) {
  const auto d = [](int64_t x, int64_t y) {
    return std::fabs(std::log(static_cast<double>(x)) - std::log(static_cast<double>(y)));
  };
  return d(a.M, M) + d(a.N, N) + d(a.K, K);
}

std::shared_ptr<const LowpGemmRates> table_for(DType ab) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto it = g_installed.find(ab); it != g_installed.end()) return it->second;
  const int threads = omp_get_max_threads();
  auto& t = g_defaults[{ab, threads}];
  if (!t) t = std::make_shared<const LowpGemmRates>(measure_gemm_lowp_rates(ab, default_shapes()));
  return t;
}

}  // namespace

namespace detail {
LowpGemmImpl auto_path(DType ab, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K) {
  if (onednn_lowp_kernel(ab).empty() && !gemm_lowp_packed_supported()) return LowpGemmImpl::kViaF32;
  const std::shared_ptr<const LowpGemmRates> t = table_for(ab);
  const LowpGemmRate* best = nullptr;
  double dist = 1e300;
  for (int pass = 0; pass < 2 && !best; ++pass)  // same transposes first, then any
    for (const LowpGemmRate& r : t->shapes) {
      if (pass == 0 && (r.shape.trans_a != trans_a || r.shape.trans_b != trans_b)) continue;
      const double d = log_distance(r.shape, M, N, K);
      if (d < dist) dist = d, best = &r;
    }
  return best ? best->faster() : LowpGemmImpl::kViaF32;
}
}  // namespace detail

std::vector<LowpGemmShape> linear_gemm_shapes(int64_t tokens, int64_t in, int64_t out, bool out_in,
                                              const std::string& name) {
  // linear.cpp's three products (its header says which is which).
  return {{false, out_in, tokens, out, in, name + " forward"},
          {false, !out_in, tokens, in, out, name + " dinput"},
          out_in ? LowpGemmShape{true, false, out, in, tokens, name + " dweight", true}
                 : LowpGemmShape{true, false, in, out, tokens, name + " dweight", true}};
}

std::string gemm_lowp_cache_path() {
  const char* env = std::getenv("KIRI_GEMM_LOWP_CACHE");
  if (env && *env) return std::string(env) == "off" ? std::string() : std::string(env);
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir;
  if (xdg && *xdg)
    dir = xdg;
  else if (home && *home)
    dir = fs::path(home) / ".cache";
  else
    return "";
  return (dir / "kiri" / cache_file_name()).string();
}

LowpGemmRates measure_gemm_lowp_rates(DType ab, const std::vector<LowpGemmShape>& shapes) {
  KIRI_CHECK(detail::is_lowp(ab), "measure_gemm_lowp_rates: dtype must be BF16 or F16, got ",
             dtype_name(ab));
  LowpGemmRates out;
  out.ab = ab;
  out.threads = omp_get_max_threads();
  out.cache_file = gemm_lowp_cache_path();
  if (out.cache_file.empty()) out.cache_note = "no cache (KIRI_GEMM_LOWP_CACHE=off, or no HOME)";
  std::vector<CacheLine> lines =
      out.cache_file.empty() ? std::vector<CacheLine>{} : read_cache(out.cache_file);
  // Whether the cores are free now, asked once and only if a kept rate was timed while they
  // were not (or before the share was kept).
  int free_now = -1;
  for (const LowpGemmShape& s : shapes) {
    KIRI_CHECK(s.M > 0 && s.N > 0 && s.K > 0, "measure_gemm_lowp_rates: empty shape ", s.M, "x",
               s.N, "x", s.K, " (", s.role, ")");
    CacheLine* hit = nullptr;
    for (CacheLine& l : lines)
      if (same_key(l, ab, out.threads, s)) hit = &l;
    if (hit && hit->rate.cpu_share < detail::kFreeCpuShare && free_now < 0)
      free_now = detail::cpu_share_now() >= detail::kFreeCpuShare;
    if (hit && !detail::measure_again(hit->rate.cpu_share, free_now == 1)) {
      out.shapes.push_back(hit->rate);
      out.shapes.back().shape = s;
      continue;
    }
    out.shapes.push_back(measure_shape(ab, s));
    ++out.measured;
    if (hit)
      hit->rate = out.shapes.back();
    else
      lines.push_back({ab, out.threads, out.shapes.back()});
  }
  if (out.measured > 0 && !out.cache_file.empty()) {
    out.cache_note = write_cache(out.cache_file, lines);
    if (!out.cache_note.empty()) out.cache_file.clear();
  }
  return out;
}

void set_gemm_lowp_rates(const LowpGemmRates& rates) {
  KIRI_CHECK(detail::is_lowp(rates.ab) && !rates.shapes.empty(),
             "set_gemm_lowp_rates: a BF16 or F16 table of at least one shape");
  std::lock_guard<std::mutex> lock(g_mu);
  g_installed[rates.ab] = std::make_shared<const LowpGemmRates>(rates);
}

void clear_gemm_lowp_rates() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_installed.clear();
  g_defaults.clear();
}

LowpGemmRates gemm_lowp_rates(DType ab) {
  KIRI_CHECK(detail::is_lowp(ab), "gemm_lowp_rates: dtype must be BF16 or F16, got ",
             dtype_name(ab));
  return *table_for(ab);
}

}  // namespace kiri::kernels::cpu
