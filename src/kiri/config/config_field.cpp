// The config schema's value converters (config_field.h).
#include "kiri/config/config_field.h"

#include <cmath>
#include <limits>

namespace kiri {

using nlohmann::json;

namespace {
// d as an int64 when it is a whole number in int64's range (casting any other double is
// undefined behaviour: 1.2e22 as a config value, a fuzz finding).
std::optional<int64_t> whole_int64(double d) {
  if (!(d >= -0x1p63 && d < 0x1p63) || d != std::trunc(d)) return std::nullopt;
  return static_cast<int64_t>(d);
}
}  // namespace

int64_t as_int(const json& v, const std::string& key) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return v.get<int64_t>();
  } else if (v.is_number_integer()) {
    return v.get<int64_t>();
  }
  if (v.is_number_float())
    if (const auto i = whole_int64(v.get<double>())) return *i;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    try {
      size_t pos = 0;
      const double d = std::stod(s, &pos);  // accepts 1e3
      if (pos == s.size())
        if (const auto i = whole_int64(d)) return *i;
    } catch (const std::exception&) {
    }
  }
  KIRI_RAISE(kConfig, key, " must be an integer", v.is_number() ? " within int64's range" : "",
             ", got ", quote_bounded(v.dump(), 80));
}

double as_float(const json& v, const std::string& key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    try {
      size_t pos = 0;
      const double d = std::stod(s, &pos);
      if (pos == s.size()) return d;
    } catch (const std::exception&) {
    }
  }
  KIRI_RAISE(kConfig, key, " must be a number, got ", quote_bounded(v.dump(), 80));
}

std::string as_string(const json& v, const std::string& key) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  KIRI_RAISE(kConfig, key, " must be a string, got ", quote_bounded(v.dump(), 80));
}

}  // namespace kiri
