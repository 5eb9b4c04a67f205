#pragma once
// Small statistics of measurements (the benchmarks' and calibration's timings).
#include <algorithm>
#include <cstddef>
#include <vector>

namespace kiri {

// The median of v: the middle element, or of an even count the upper of the two middle
// ones (an element measured, never an average of two); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace kiri
