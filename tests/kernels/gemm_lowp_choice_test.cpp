// kAuto's measured choice of the 16-bit GEMM path (kernels/ops.h): the table, its shape
// classes, the cache file, and the measurement's stability.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gemm_lowp_paths.h"
#include "kiri/kernels/cpu/gemm_lowp.h"
#include "kiri/kernels/ops.h"
#include "temp_dir.h"

namespace kiri {
namespace {

using kernels::LowpGemmImpl;
using kernels::LowpGemmRate;
using kernels::LowpGemmRates;
using kernels::LowpGemmShape;

// KIRI_GEMM_LOWP_CACHE set for the test's lifetime, then unset; the tables are forgotten on
// both ends so that no test sees another's.
class ScopedCache {
 public:
  explicit ScopedCache(const std::string& value) {
    ::setenv("KIRI_GEMM_LOWP_CACHE", value.c_str(), 1);
    kernels::clear_gemm_lowp_rates();
  }
  ~ScopedCache() {
    ::unsetenv("KIRI_GEMM_LOWP_CACHE");
    kernels::clear_gemm_lowp_rates();
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `text` (a cache file) with the share field (the tenth) of every rate line replaced by `share`.
std::string with_share(const std::string& text, const std::string& share) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') {
      std::istringstream f(line);
      std::vector<std::string> fields;
      for (std::string x; f >> x;) fields.push_back(x);
      if (fields.size() > 9) fields[9] = share;
      line.clear();
      for (const std::string& x : fields) line += (line.empty() ? "" : " ") + x;
    }
    out += line + "\n";
  }
  return out;
}

// A rate line of a table: via_f32, onednn and packed in GFLOP/s.
LowpGemmRate rate(const LowpGemmShape& s, double via_f32, double onednn, double packed) {
  LowpGemmRate r{s, via_f32 * 1e9, onednn * 1e9};
  r.packed = packed * 1e9;
  return r;
}

// The shapes are linear.cpp's three products, for both weight layouts.
TEST(GemmLowpChoice, LinearShapesAreTheLayersProducts) {
  const std::vector<LowpGemmShape> conv = kernels::linear_gemm_shapes(512, 256, 1024, false, "fc");
  ASSERT_EQ(conv.size(), 3u);
  // forward out[N,OC] = inp[N,IC] @ W[IC,OC]
  EXPECT_FALSE(conv[0].trans_a);
  EXPECT_FALSE(conv[0].trans_b);
  EXPECT_EQ((std::vector<int64_t>{conv[0].M, conv[0].N, conv[0].K}),
            (std::vector<int64_t>{512, 1024, 256}));
  EXPECT_EQ(conv[0].role, "fc forward");
  // dinp[N,IC] = dout[N,OC] @ W^T
  EXPECT_TRUE(conv[1].trans_b);
  EXPECT_EQ((std::vector<int64_t>{conv[1].M, conv[1].N, conv[1].K}),
            (std::vector<int64_t>{512, 256, 1024}));
  // dW[IC,OC] = inp^T @ dout
  EXPECT_TRUE(conv[2].trans_a);
  EXPECT_EQ((std::vector<int64_t>{conv[2].M, conv[2].N, conv[2].K}),
            (std::vector<int64_t>{256, 1024, 512}));
  const std::vector<LowpGemmShape> nt = kernels::linear_gemm_shapes(512, 256, 1024, true, "up");
  EXPECT_TRUE(nt[0].trans_b);   // inp @ W^T, W [OC, IC]
  EXPECT_FALSE(nt[1].trans_b);  // dout @ W
  EXPECT_EQ((std::vector<int64_t>{nt[2].M, nt[2].N, nt[2].K}),
            (std::vector<int64_t>{1024, 256, 512}));  // dW[OC,IC] = dout^T @ inp
}

// A GEMM takes the path of the installed table's shape with its transposes nearest in log
// size; the description counts the shapes each path takes.
TEST(GemmLowpChoice, EachShapeClassTakesItsFasterPath) {
  KIRI_USE_GEMM_LOWP(LowpGemmImpl::kAuto, DType::kBF16);
  if (kernels::gemm_lowp_onednn_kernel(DType::kBF16).empty())
    GTEST_SKIP() << "oneDNN has no BF16 matmul on this CPU: no onednn path to name";
  const ScopedCache cache("off");
  LowpGemmRates t;
  t.ab = DType::kBF16;
  t.shapes = {rate({false, false, 256, 1024, 256, "small"}, 100, 200, 150),   // onednn fastest
              rate({false, false, 4096, 4096, 4096, "big"}, 300, 200, 250),   // via_f32 fastest
              rate({true, false, 256, 1024, 256, "dweight"}, 100, 100, 100),  // a tie: via_f32
              rate({false, true, 512, 512, 512, "dinput"}, 100, 50, 120)};    // packed fastest
  kernels::set_gemm_lowp_rates(t);
  using kernels::cpu::detail::auto_path;
  EXPECT_EQ(auto_path(DType::kBF16, false, false, 300, 900, 300), LowpGemmImpl::kOneDnnMatmul);
  EXPECT_EQ(auto_path(DType::kBF16, false, false, 3000, 5000, 4000), LowpGemmImpl::kViaF32);
  EXPECT_EQ(auto_path(DType::kBF16, true, false, 4000, 4000, 4000), LowpGemmImpl::kViaF32);
  EXPECT_EQ(auto_path(DType::kBF16, false, true, 400, 600, 500), LowpGemmImpl::kPacked);
  // No shape with these transposes: the nearest of any.
  EXPECT_EQ(auto_path(DType::kBF16, true, true, 250, 1000, 250), LowpGemmImpl::kOneDnnMatmul);
  // The big shape holds most FLOPs: the path named is via_f32's, with the split.
  EXPECT_EQ(kernels::gemm_lowp_path(DType::kBF16), LowpGemmImpl::kViaF32);
  EXPECT_EQ(kernels::gemm_lowp_path_description(DType::kBF16),
            "via_f32 on 2 of 4 shapes, packed on 1, onednn (" +
                kernels::gemm_lowp_onednn_kernel(DType::kBF16) + ") on 1");
  // A forced path overrides the table.
  kernels::set_gemm_lowp_impl(LowpGemmImpl::kOneDnnMatmul);
  EXPECT_EQ(kernels::gemm_lowp_path(DType::kBF16), LowpGemmImpl::kOneDnnMatmul);
}

// Rates are measured once per machine: the second call reads the file, a damaged line is
// measured again, and a file that cannot be written is named and leaves the rates usable.
TEST(GemmLowpChoice, TheCacheFileKeepsTheRates) {
  const std::string dir = kiri::testing::temp_dir("gemm-lowp-cache");
  const std::string file = dir + "/sub/rates.txt";
  const ScopedCache cache(file);
  EXPECT_EQ(kernels::gemm_lowp_cache_path(), file);
  const std::vector<LowpGemmShape> shapes = kernels::linear_gemm_shapes(64, 32, 96, false, "t");
  const LowpGemmRates first = kernels::measure_gemm_lowp_rates(DType::kBF16, shapes);
  EXPECT_EQ(first.measured, 3);
  EXPECT_EQ(first.cache_file, file) << first.cache_note;
  EXPECT_EQ(first.threads, omp_get_max_threads());
  const bool onednn = !kernels::gemm_lowp_onednn_kernel(DType::kBF16).empty();
  const bool packed = kernels::gemm_lowp_available(LowpGemmImpl::kPacked, DType::kBF16);
  for (const LowpGemmRate& r : first.shapes) {
    EXPECT_GT(r.via_f32, 0);
    EXPECT_EQ(r.onednn > 0, onednn);
    EXPECT_EQ(r.packed > 0, packed) << r.shape.role;  // it takes these shapes (and dweight's C)
  }
  // Each line keeps the share of the cores its timing had (a tenth field); marked as timed on
  // free cores, every line is read back, not measured again.
  std::string kept = read_text(file);
  for (const LowpGemmRate& r : first.shapes) {
    EXPECT_GE(r.cpu_share, 0.0);
    EXPECT_LE(r.cpu_share, 1.0);
  }
  std::ofstream(file) << with_share(kept, "1.000");
  const LowpGemmRates again = kernels::measure_gemm_lowp_rates(DType::kBF16, shapes);
  EXPECT_EQ(again.measured, 0);
  ASSERT_EQ(again.shapes.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(again.shapes[i].via_f32, first.shapes[i].via_f32, 1e-5 * first.shapes[i].via_f32);
    EXPECT_NEAR(again.shapes[i].packed, first.shapes[i].packed, 1e-5 * first.shapes[i].packed);
    EXPECT_EQ(again.shapes[i].faster(), first.shapes[i].faster());
  }
  // Another thread count is another measurement.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads == 1 ? 2 : 1);
  EXPECT_EQ(kernels::measure_gemm_lowp_rates(DType::kBF16, shapes).measured, 3);
  omp_set_num_threads(threads);
  // A damaged file: its unreadable lines are measured again and the file rewritten.
  std::string text = read_text(file);
  const size_t line = text.find("\nBF16 ");
  ASSERT_NE(line, std::string::npos) << text;
  text.replace(line + 1, 4, "XX16");
  std::ofstream(file) << text << "garbage line\n";
  EXPECT_EQ(kernels::measure_gemm_lowp_rates(DType::kBF16, shapes).measured, 1);
  EXPECT_EQ(read_text(file).find("garbage"), std::string::npos);
  // A path where no file can be made.
  ::setenv("KIRI_GEMM_LOWP_CACHE", (file + "/not-a-dir/rates.txt").c_str(), 1);
  const LowpGemmRates unkept = kernels::measure_gemm_lowp_rates(DType::kBF16, shapes);
  EXPECT_EQ(unkept.measured, 3);
  EXPECT_EQ(unkept.cache_file, "");
  EXPECT_NE(unkept.cache_note.find("not-a-dir"), std::string::npos) << unkept.cache_note;
  ::setenv("KIRI_GEMM_LOWP_CACHE", "off", 1);
  EXPECT_EQ(kernels::gemm_lowp_cache_path(), "");
}

// Without an installed table kAuto measures the default shapes once per thread count, and
// every 16-bit GEMM then takes a path of that table.
TEST(GemmLowpChoice, WithoutATableTheDefaultShapesAreMeasuredOnce) {
  KIRI_USE_GEMM_LOWP(LowpGemmImpl::kAuto, DType::kBF16);
  const ScopedCache cache("off");
  const LowpGemmRates t = kernels::gemm_lowp_rates(DType::kBF16);
  EXPECT_EQ(t.shapes.size(), 3u);
  EXPECT_EQ(t.measured, 3);
  // The same table on the second ask: not measured again.
  const LowpGemmRates u = kernels::gemm_lowp_rates(DType::kBF16);
  EXPECT_EQ(u.shapes[0].via_f32, t.shapes[0].via_f32);
}

// A kept rate is timed again only when it was timed beside other work on the cores (or
// before the share was kept) and the cores are free now.
TEST(GemmLowpChoice, ARateTimedBesideOtherWorkIsTimedAgainOnFreeCores) {
  using kernels::cpu::detail::measure_again;
  EXPECT_FALSE(measure_again(1.0, true));
  EXPECT_FALSE(measure_again(0.95, true));
  EXPECT_TRUE(measure_again(0.6, true));
  EXPECT_FALSE(measure_again(0.6, false));
  EXPECT_TRUE(measure_again(0, true));  // not known: a file from before the share
  EXPECT_FALSE(measure_again(0, false));
}

// The scheduler's counts see other work on the cores: with twice as many spinning threads as
// the machine has cores, the OpenMP threads get well under kFreeCpuShare of their runnable
// time. Timing: run alone.
TEST(GemmLowpChoiceTiming, TheCpuShareSeesOtherWorkOnTheCores) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (unsigned i = 0; i < 2 * cores; ++i)
    spinners.emplace_back([&stop] {
      volatile double x = 1;
      while (!stop.load(std::memory_order_relaxed)) x = x * 1.0000001 + 1e-9;
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  double busy = 1;
  for (int i = 0; i < 3; ++i) busy = std::min(busy, kernels::cpu::detail::cpu_share_now());
  stop = true;
  for (std::thread& t : spinners) t.join();
  EXPECT_LT(busy, kernels::cpu::detail::kFreeCpuShare);
  EXPECT_GT(busy, 0.0);
}

// On free cores, a file's lines timed beside other work (share 0.5) or damaged (nine fields of
// eleven) are timed again and rewritten with their new share; a line timed on free cores is
// read back as it is. Timing: run alone, so that the cores are free.
TEST(GemmLowpChoiceTiming, RatesTimedBesideOtherWorkAreTimedAgain) {
  if (kernels::cpu::detail::cpu_share_now() < kernels::cpu::detail::kFreeCpuShare)
    GTEST_SKIP() << "the cores are not free now: nothing would be timed again";
  const std::string dir = kiri::testing::temp_dir("gemm-lowp-share");
  const std::string file = dir + "/rates.txt";
  const ScopedCache cache(file);
  const std::vector<LowpGemmShape> shapes = kernels::linear_gemm_shapes(64, 32, 96, false, "t");
  const int th = omp_get_max_threads();
  auto line = [&](const LowpGemmShape& s, const std::string& tail) {
    return "BF16 " + std::to_string(th) + " " + std::to_string(s.trans_a) + " " +
           std::to_string(s.trans_b) + " " + std::to_string(s.M) + " " + std::to_string(s.N) + " " +
           std::to_string(s.K) + " " + tail + "\n";
  };
  // Made-up rates no GEMM here measures: which lines were timed again shows in them.
  std::ofstream(file) << line(shapes[0], "7 3 0.5 2") << line(shapes[1], "7 3")
                      << line(shapes[2], "7 3 1.000 2");
  const LowpGemmRates r = kernels::measure_gemm_lowp_rates(DType::kBF16, shapes);
  EXPECT_EQ(r.measured, 2);
  ASSERT_EQ(r.shapes.size(), 3u);
  EXPECT_NE(r.shapes[0].via_f32, 7);
  EXPECT_NE(r.shapes[1].via_f32, 7);
  EXPECT_EQ(r.shapes[2].via_f32, 7);
  EXPECT_EQ(r.shapes[2].cpu_share, 1.0);
  const std::string text = read_text(file);
  EXPECT_EQ(text.find(" 7 3 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find(" 7 3 1.000"), std::string::npos) << text;
}

// The measured choice is stable: in 5 measurements on this machine each shape takes the
// same path, except where that path's rate was within 10% of the fastest's (a near tie, where
// either path is as fast). Timing: run alone (tests/CMakeLists.txt).
TEST(GemmLowpChoiceTiming, TheChoiceIsStable) {
  if (kernels::gemm_lowp_onednn_kernel(DType::kBF16).empty() &&
      !kernels::gemm_lowp_available(LowpGemmImpl::kPacked, DType::kBF16))
    GTEST_SKIP() << "no oneDNN BF16 matmul and no packed kernel here: nothing to choose";
  const ScopedCache cache("off");
  const std::vector<LowpGemmShape> shapes = kernels::linear_gemm_shapes(256, 256, 1024, false, "s");
  std::vector<LowpGemmRates> runs;
  for (int i = 0; i < 5; ++i)
    runs.push_back(kernels::measure_gemm_lowp_rates(DType::kBF16, shapes));
  auto rate_of = [](const LowpGemmRate& x, LowpGemmImpl p) {
    return p == LowpGemmImpl::kOneDnnMatmul ? x.onednn
           : p == LowpGemmImpl::kPacked     ? x.packed
                                            : x.via_f32;
  };
  for (size_t s = 0; s < shapes.size(); ++s) {
    std::map<LowpGemmImpl, int> votes;
    for (const LowpGemmRates& r : runs) ++votes[r.shapes[s].faster()];
    LowpGemmImpl majority = LowpGemmImpl::kViaF32;
    for (const auto& [path, n] : votes)
      if (n > votes[majority]) majority = path;
    for (const LowpGemmRates& r : runs) {
      const LowpGemmRate& x = r.shapes[s];
      if (x.faster() == majority) continue;
      const double ratio = x.fastest() / rate_of(x, majority);
      EXPECT_LT(ratio, 1.10) << shapes[s].role << ": took "
                             << kernels::gemm_lowp_impl_name(x.faster()) << " at via_f32 "
                             << x.via_f32 / 1e9 << " / onednn " << x.onednn / 1e9 << " / packed "
                             << x.packed / 1e9 << " GFLOP/s against the majority's "
                             << kernels::gemm_lowp_impl_name(majority);
    }
  }
}

// Work on the cores that comes and goes while the paths are timed slows them alike: the two
// "paths" below are the same spin, and the first 12 calls of all (a load that then leaves)
// take 3x as long. Timed one after the other, the first path would see only the slow calls
// (3x the second's); alternating, both end with the same best.
TEST(GemmLowpChoiceTiming, ALoadThatComesAndGoesSlowsBothPaths) {
  int calls = 0;
  auto spin = [&calls] {
    const auto d = std::chrono::microseconds(calls++ < 12 ? 6000 : 2000);
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  const std::vector<double> best = kernels::cpu::detail::best_seconds_interleaved({spin, spin});
  ASSERT_EQ(best.size(), 2u);
  EXPECT_LT(std::max(best[0], best[1]) / std::min(best[0], best[1]), 1.3)
      << best[0] << " s against " << best[1] << " s";
}

// A path over 1.5x slower than the fastest after a round is out of the running: it is not
// called again (its best so far stays its rate), while the others still get at least 3
// rounds. The slow "path" spins 8 ms a call, the fast one 1 ms.
TEST(GemmLowpChoiceTiming, APathFarBehindIsNotTimedAgain) {
  int slow_calls = 0, fast_calls = 0;
  auto spin = [](int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
    }
  };
  const std::vector<double> best = kernels::cpu::detail::best_seconds_interleaved(
      {[&] { ++slow_calls, spin(8); }, [&] { ++fast_calls, spin(1); }});
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(slow_calls, 2);  // the untimed call and the first round
  EXPECT_GE(fast_calls, 4);
  EXPECT_GT(best[0], 4 * best[1]);
}

}  // namespace
}  // namespace kiri
