#include "kiri/config/config_file.h"

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/json_guard.h"

namespace kiri {

using nlohmann::json;

namespace {
// A config file is a few KiB of keys; the cap keeps a huge or endless file out of memory.
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;
// The schema nests 2 levels ({"train": {"lr": ...}}); 64 refuses hostile nesting before a
// recursive parser or dump() can exhaust the stack.
constexpr int kMaxConfigDepth = 64;
}  // namespace

json parse_config_json(std::string_view text, const std::string& where, const std::string& what) {
  if (json_nesting_depth(text, kMaxConfigDepth + 1) > kMaxConfigDepth)
    KIRI_RAISE(kConfig, what, " '", where, "' nests more than ", kMaxConfigDepth,
               " levels deep (a config nests 2)");
  // nlohmann stops at a NUL byte and would ignore whatever follows it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    KIRI_RAISE(kConfig, what, " '", where, "' holds a NUL byte at offset ", nul,
               ": it is not a text file");
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a huge number
    KIRI_RAISE(kConfig, what, " '", where, "' is not valid JSON: ", quote_bounded(e.what(), 300));
  }
  if (const std::string dup = json_duplicate_key(text, /*ignore_comments=*/true); !dup.empty())
    KIRI_RAISE(kConfig, what, " '", where, "': key '", quote_bounded(dup, 120),
               "' appears twice (which one applies would be a guess)");
  KIRI_CHECK_KIND(kConfig, j.is_object(), what, " '", where, "' must be a JSON object, got ",
                  j.type_name());
  return j;
}

std::string read_config_text(const std::string& file, const std::string& what) {
  try {
    return read_small_file(file, kMaxConfigBytes, ErrorKind::kConfig, what);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kConfig) throw;
    KIRI_RAISE(kConfig, "cannot open ", what, " '", file, "': ", e.message());
  }
}

json read_config_file(const std::string& file, const std::string& what) {
  return parse_config_json(read_config_text(file, what), file, what);
}

}  // namespace kiri
