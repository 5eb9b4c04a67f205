// The FMA peak (kernels/peak.h): stable across measurements, per dtype
// never below fp32, and peak_flops = the core's peak x threads.
#include "kiri/kernels/peak.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::kernels {
namespace {

// Best of several short repeats inside each measurement: five of them agree
// within 5% while other processes run on the other core (the suite runs
// serially: a test on the sibling hyperthread shares the FMA units). A host
// busy for a whole measurement (CI under ASan once measured fp32 at 0.76x of
// its best; a clean clone's two builds once put one bf16 measurement at 0.65x)
// is an outlier, not instability: the median of the five must be within 5% of
// their best, which tolerates two disturbed measurements of five. Up to 3 sets.
TEST(PeakFlopsTiming, MedianOfFiveMeasurementsWithinFivePercentOfTheBest) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::string seen;
    double spread = 0;
    for (int attempt = 1; attempt <= 3; ++attempt) {
      std::vector<double> v;
      for (int i = 0; i < 5; ++i) v.push_back(measure_core_peak(dtype).flops);
      std::sort(v.begin(), v.end());
      EXPECT_GT(v.front(), 1e8) << dtype_name(dtype);
      spread = v.back() / v[2];  // best over median
      seen += " attempt " + std::to_string(attempt) + ":";
      for (double x : v) seen += " " + std::to_string(x);
      seen += " FLOP/s;";
      if (spread <= 1.05) break;
    }
    EXPECT_LE(spread, 1.05) << dtype_name(dtype) << ":" << seen << " ("
                            << measure_core_peak(dtype).instruction << ")";
  }
}

TEST(PeakFlopsTiming, SixteenBitNeverBelowFp32AndScalesWithThreads) {
  const CorePeak& f32 = core_peak(DType::kF32);
  EXPECT_FALSE(f32.instruction.empty());
  // A 16-bit product is exact in fp32: the 16-bit candidates include fp32's,
  // so only noise can put them below it.
  EXPECT_GE(core_peak(DType::kBF16).flops, 0.95 * f32.flops);
  EXPECT_GE(core_peak(DType::kF16).flops, 0.95 * f32.flops);
  // Cached: the same object, the same number.
  EXPECT_EQ(&core_peak(DType::kF32), &f32);
  EXPECT_DOUBLE_EQ(peak_flops(DType::kF32, 3), 3 * f32.flops);
  EXPECT_DOUBLE_EQ(peak_flops(DType::kF32, 1), f32.flops);
}

TEST(PeakFlops, RejectsBadInput) {
  EXPECT_THROW(peak_flops(DType::kF32, 0), Error);
  EXPECT_THROW(core_peak(DType::kI32), Error);
  EXPECT_THROW(measure_core_peak(DType::kF32, 0), Error);
}

}  // namespace
}  // namespace kiri::kernels
