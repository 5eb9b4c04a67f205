#include "kiri/ckpt/checkpoint_state.h"

#include <filesystem>
#include <limits>

#include "kiri/base/file_read.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/checkpoint_manifest.h"

namespace kiri::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// `key`'s value as an integer in [lo, hi]: a float (10.5), a string or a value outside the
// range (-5, 2^64-1) is an error naming it.
int64_t integer_in(const json& j, const char* key, int64_t lo, int64_t hi,
                   const std::string& where) {
  const bool is_int = j.is_number_integer();
  const bool fits =
      is_int && (j.is_number_unsigned() ? j.get<uint64_t>() <= uint64_t(hi) &&
                                              static_cast<int64_t>(j.get<uint64_t>()) >= lo
                                        : j.get<int64_t>() >= lo && j.get<int64_t>() <= hi);
  if (!fits)
    KIRI_RAISE(kCheckpoint, where, ": ", key, " must be an integer in [", lo, ", ", hi, "], got ",
               quote_bounded(j.dump(), 80));
  return j.get<int64_t>();
}

const json& member(const json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) KIRI_RAISE(kCheckpoint, where, " has no '", key, "'");
  return *it;
}

// optimizer_files: names of files in the step directory, never paths out of it.
std::vector<std::string> file_names(const json& j, const std::string& where) {
  constexpr size_t kMaxFiles = size_t{1} << 20;
  KIRI_CHECK_KIND(kCheckpoint, j.is_array() && !j.empty() && j.size() <= kMaxFiles, where,
                  ": optimizer_files must be a list of 1 to ", kMaxFiles, " file names, got ",
                  quote_bounded(j.dump(), 80));
  std::vector<std::string> out;
  for (const json& f : j) {
    const std::string name = f.is_string() ? f.get<std::string>() : "";
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      KIRI_RAISE(kCheckpoint, where, ": optimizer_files holds ", quote_bounded(f.dump(), 80),
                 ", not the name of a file in the step directory");
    out.push_back(name);
  }
  return out;
}

LossScalerState loss_scaler_state(const json& ls, const std::string& where) {
  KIRI_CHECK_KIND(kCheckpoint, ls.is_object(), where, ": loss_scaler must be an object, got ",
                  quote_bounded(ls.dump(), 80));
  const json& scale = member(ls, "scale", where + ": loss_scaler");
  KIRI_CHECK_KIND(kCheckpoint, scale.is_number() && scale.get<double>() > 0, where,
                  ": loss_scaler.scale must be a positive number, got ",
                  quote_bounded(scale.dump(), 80));
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {
      scale.get<double>(),
      integer_in(member(ls, "clean_steps", where), "loss_scaler.clean_steps", 0, kMax, where),
      integer_in(member(ls, "skipped_steps", where), "loss_scaler.skipped_steps", 0, kMax, where)};
}

CheckpointState from_json(const json& state, const std::string& where) {
  KIRI_CHECK_KIND(kCheckpoint, state.is_object(), where, " must hold a JSON object, got ",
                  state.type_name());
  CheckpointState s;
  const json& version = member(state, "format_version", where);
  s.format_version = static_cast<int>(integer_in(version, "format_version", 0, 1 << 20, where));
  KIRI_CHECK_KIND(kCheckpoint, s.format_version == kCheckpointFormatVersion, where,
                  " has format_version ", s.format_version, ", this kiri reads ",
                  kCheckpointFormatVersion);
  s.step = integer_in(member(state, "step", where), "step", 0, kMaxCheckpointStep, where);
  s.optimizer_step = integer_in(member(state, "optimizer_step", where), "optimizer_step", 0,
                                kMaxCheckpointStep, where);
  const json& data = member(state, "data", where);
  KIRI_CHECK_KIND(kCheckpoint, data.is_object(), where, ": data must be an object, got ",
                  quote_bounded(data.dump(), 80));
  const json& position = member(data, "position", where + ": data");
  KIRI_CHECK_KIND(kCheckpoint, position.is_number_unsigned(), where,
                  ": data.position must be a non-negative integer, got ",
                  quote_bounded(position.dump(), 80));
  s.data_position = position.get<uint64_t>();
  s.optimizer_files = file_names(member(state, "optimizer_files", where), where);
  if (const auto it = state.find("loss_scaler"); it != state.end() && !it->is_null())
    s.loss_scaler = loss_scaler_state(*it, where);
  if (const auto it = state.find("layout"); it != state.end()) s.layout = *it;
  if (const auto it = state.find("global_batch"); it != state.end())
    s.global_batch = integer_in(*it, "global_batch", 1, int64_t{1} << 40, where);
  if (const auto it = state.find("fingerprints"); it != state.end() && !it->is_null()) {
    KIRI_CHECK_KIND(kCheckpoint, it->is_object(), where, ": fingerprints must be an object, got ",
                    it->type_name());
    s.fingerprints = *it;
  }
  if (const auto it = state.find("config"); it != state.end() && !it->is_null()) {
    KIRI_CHECK_KIND(kCheckpoint, it->is_object(), where, ": config must be an object, got ",
                    it->type_name());
    s.config = *it;
  }
  if (const auto it = state.find("files"); it != state.end()) s.files = *it;
  return s;
}

}  // namespace

CheckpointState parse_checkpoint_state(std::string_view text, const std::string& where) {
  KIRI_CHECK_KIND(kCheckpoint, text.size() <= kMaxStateBytes, where, " is ", text.size(),
                  " bytes, more than the ", kMaxStateBytes, " allowed");
  if (json_nesting_depth(text, kMaxStateDepth + 1) > kMaxStateDepth)
    KIRI_RAISE(kCheckpoint, where, " nests more than ", kMaxStateDepth,
               " levels deep (kiri writes 4)");
  // nlohmann stops at a NUL byte and would accept whatever follows (a file a crash left
  // half zeroes, say): no JSON text holds one outside a string's escapes.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    KIRI_RAISE(kCheckpoint, where, " holds a NUL byte at offset ", nul, " of ", text.size(),
               ": it is damaged");
  json state;
  try {
    state = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    KIRI_RAISE(kCheckpoint, where, " is not valid JSON: ", quote_bounded(e.what(), 300));
  }
  if (const std::string dup = json_duplicate_key(text, false); !dup.empty())
    KIRI_RAISE(kCheckpoint, where, ": key '", quote_bounded(dup, 120), "' appears twice");
  // The values first: one kiri cannot have written is named by its key, not as a checksum.
  CheckpointState s = from_json(state, where);
  verify_state_checksum(state, where);
  return s;
}

CheckpointState read_checkpoint_state(const std::string& dir) {
  const std::string path = dir + "/state.json";
  CheckpointState state = parse_checkpoint_state(
      read_small_file(path, kMaxStateBytes, ErrorKind::kCheckpoint, "checkpoint state"), path);
  verify_checkpoint_files(dir, state);
  return state;
}

std::string resolve_model_folder(const std::string& path) {
  std::error_code ec;
  KIRI_CHECK_KIND(kCheckpoint, fs::is_directory(path, ec), path, " is not a folder");
  // A kiri step folder: its state.json's manifest vouches for config.json and the weights.
  if (fs::exists(path + "/config.json", ec) && fs::exists(path + "/state.json", ec))
    read_checkpoint_state(path);
  if (fs::exists(path + "/config.json", ec)) return path;
  if (fs::exists(path + "/latest", ec) || fs::exists(path + "/state.json", ec)) {
    const std::string dir = ckpt::resolve_checkpoint(path);
    read_checkpoint_state(dir);
    KIRI_CHECK_KIND(kCheckpoint, fs::exists(dir + "/config.json", ec), dir,
                    " has no config.json (a checkpoint of an older kiri): kiri export it first");
    return dir;
  }
  KIRI_RAISE(kCheckpoint, path,
             " holds no config.json: not a Hugging Face model folder nor a kiri checkpoint");
}

}  // namespace kiri::ckpt
