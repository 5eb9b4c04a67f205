#include "kiri/base/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"

namespace kiri {

namespace {
// 1 EiB: far beyond any machine's memory or disk, and far from int64's end.
constexpr int64_t kMaxBytes = int64_t{1} << 60;
}  // namespace

int64_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    KIRI_RAISE(kInvalidArgument, "cannot read a byte size from '", quote_bounded(text, 80),
               "' (expected e.g. 512MiB, 2GiB, 1e9)");
  }
  std::string unit = text.substr(pos);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "TiB")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else if (unit == "TB")
    scale = 1e12;
  if (scale == 0 || !(value >= 0) || !std::isfinite(value))
    KIRI_RAISE(kInvalidArgument, "cannot read a byte size from '", quote_bounded(text, 80),
               "' (expected a non-negative number with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  // Checked before the conversion: a double past int64's range converts to garbage.
  if (value * scale > static_cast<double>(kMaxBytes))
    KIRI_RAISE(kInvalidArgument, "byte size '", quote_bounded(text, 80),
               "' is more than the 1 EiB (2^60 bytes) kiri accepts");
  return static_cast<int64_t>(std::llround(value * scale));
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace kiri
