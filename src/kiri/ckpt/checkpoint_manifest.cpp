#include "kiri/ckpt/checkpoint_manifest.h"

#include <algorithm>
#include <filesystem>

#include "kiri/base/atomic_file.h"
#include "kiri/base/file_read.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::ckpt {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kChecksum = "checksum";
constexpr const char* kFiles = "files";
// The checksum of the state `latest` named when this one was written: the checkpoint it was
// committed over, so that one committed after `latest`'s and never named is found again.
constexpr const char* kPrevious = "previous";
constexpr const char* kSafetensorsExt = ".safetensors";

bool is_safetensors(const std::string& name) {
  const std::string ext = kSafetensorsExt;
  return name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0;
}

// The state's own checksum: XXH3-64 of its compact JSON without the checksum key. nlohmann
// writes numbers in their shortest round-trip form and keys sorted, so a parse and dump of
// an undamaged state gives the bytes hashed when it was written.
std::string state_checksum(json state) {
  state.erase(kChecksum);
  const std::string text = state.dump();
  return std::string(ckpt::kChecksumAlgorithm) + ":" +
         ckpt::checksum_hex(ckpt::checksum_of(text.data(), text.size()));
}

// A manifest entry for dir/name.
json manifest_entry(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  if (is_safetensors(name)) {
    const ckpt::SafetensorsFile f = ckpt::SafetensorsFile::map(path);
    json e = {{"bytes", fs::file_size(path)},
              {"header_xxh3_64", ckpt::checksum_hex(f.header_digest())}};
    if (const auto it = f.metadata().find(kStepMetadataKey); it != f.metadata().end())
      e["step"] = it->second;
    return e;
  }
  const std::string bytes = read_file(path);
  return {{"bytes", bytes.size()},
          {"xxh3_64", ckpt::checksum_hex(ckpt::checksum_of(bytes.data(), bytes.size()))}};
}

// A manifest entry's string `key`, or an error naming it.
std::string entry_string(const json& entry, const char* key, const std::string& where,
                         const std::string& name) {
  const auto it = entry.find(key);
  KIRI_CHECK_KIND(kCheckpoint, it != entry.end() && it->is_string(), where, ": files.",
                  quote_bounded(name, 120), " has no string '", key, "'");
  return it->get<std::string>();
}

void verify_file(const std::string& dir, const std::string& name, const json& entry,
                 const CheckpointState& state) {
  const std::string where = dir + "/state.json", path = dir + "/" + name;
  KIRI_CHECK_KIND(kCheckpoint,
                  !name.empty() && name.find('/') == std::string::npos && name != "." &&
                      name != ".." && entry.is_object(),
                  where, ": files holds ", quote_bounded(name, 120), ": ",
                  quote_bounded(entry.dump(), 120), ", not a file of the step directory");
  const auto bytes = entry.find("bytes");
  KIRI_CHECK_KIND(kCheckpoint, bytes != entry.end() && bytes->is_number_unsigned(), where,
                  ": files.", name, " has no size ('bytes')");
  std::error_code ec;
  KIRI_CHECK_KIND(kCheckpoint, fs::is_regular_file(path, ec), where, " names ", name,
                  " in its manifest, but the file is missing (or not a regular file)");
  const uint64_t size = fs::file_size(path, ec);
  KIRI_CHECK_KIND(kCheckpoint, !ec && size == bytes->get<uint64_t>(), path, " is ", size,
                  " bytes, but state.json's manifest says ", bytes->get<uint64_t>(),
                  ": the file is damaged or another checkpoint's");
  if (!is_safetensors(name)) {
    const std::string want = entry_string(entry, "xxh3_64", where, name);
    const std::string text = read_file(path);
    const std::string got = ckpt::checksum_hex(ckpt::checksum_of(text.data(), text.size()));
    KIRI_CHECK_KIND(kCheckpoint, got == want, path, " hashes to xxh3_64 ", got,
                    ", but state.json's manifest says ", want,
                    ": the file is damaged or another checkpoint's");
    return;
  }
  const std::string want = entry_string(entry, "header_xxh3_64", where, name);
  const ckpt::SafetensorsFile f = ckpt::SafetensorsFile::map(path);
  KIRI_CHECK_KIND(kCheckpoint, f.has_checksums(), path,
                  " has no per-tensor checksums, but kiri wrote them into every file of this "
                  "checkpoint: the file was replaced");
  const auto step = f.metadata().find(kStepMetadataKey);
  if (step != f.metadata().end() && step->second != std::to_string(state.step))
    KIRI_RAISE(kCheckpoint, path, " is the file of step ", quote_bounded(step->second, 40),
               " (its '", kStepMetadataKey, "' metadata), but ", where, " is step ", state.step,
               ": a file of another checkpoint was copied in");
  const std::string got = ckpt::checksum_hex(f.header_digest());
  KIRI_CHECK_KIND(kCheckpoint, got == want, path, ": its header hashes to xxh3_64 ", got,
                  ", but state.json's manifest says ", want,
                  ": the file was replaced or its header is damaged");
}

// state.json's checksum in dir, "" when it has none or cannot be read.
std::string checksum_in(const std::string& dir) {
  try {
    const json s = json::parse(
        read_small_file(dir + "/state.json", kMaxStateBytes, ErrorKind::kCheckpoint, "state"));
    const auto it = s.find(kChecksum);
    return it != s.end() && it->is_string() ? it->get<std::string>() : "";
  } catch (const std::exception&) {
    return "";
  }
}

// The checksum of the checkpoint root's `latest` names now ("" when none): the step folder
// is .step_N.tmp inside the root.
std::string previous_checksum(const std::string& tmp_dir) {
  const std::string root = fs::path(tmp_dir).parent_path().string();
  std::error_code ec;
  if (!fs::exists(fs::path(root) / "latest", ec)) return "";
  try {
    return checksum_in(ckpt::resolve_checkpoint(root));
  } catch (const Error&) {
    return "";
  }
}

// A complete step folder of root other than `dir` that was committed over `dir` (its
// "previous" is dir's checksum), the newest such; "" when none.
std::string committed_after(const std::string& root, const std::string& dir,
                            const std::vector<int64_t>& steps) {
  const std::string sum = checksum_in(dir);
  if (sum.empty()) return "";
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string other = (fs::path(root) / ckpt::step_dir_name(*it)).string();
    if (fs::path(other) == fs::path(dir)) continue;
    try {
      const json s = json::parse(
          read_small_file(other + "/state.json", kMaxStateBytes, ErrorKind::kCheckpoint, "state"));
      if (s.value(kPrevious, std::string()) != sum) continue;
      read_checkpoint_state(other);  // complete: its state and files verify
      return other;
    } catch (const std::exception&) {
    }
  }
  return "";
}

}  // namespace

void write_checkpoint_state(const std::string& dir, const std::string& state_text) {
  json state = json::parse(state_text);
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != "state.json" && name[0] != '.' && e.is_regular_file()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  json files = json::object();
  for (const std::string& name : names) files[name] = manifest_entry(dir, name);
  state[kFiles] = files;
  if (const std::string previous = previous_checksum(dir); !previous.empty())
    state[kPrevious] = previous;
  state.erase(kChecksum);
  state[kChecksum] = state_checksum(state);
  write_file_atomic(dir + "/state.json", state.dump(2) + "\n");
}

void verify_state_checksum(const json& state, const std::string& where) {
  const auto sum = state.find(kChecksum);
  const bool has_files = state.contains(kFiles);
  if (sum == state.end() && !has_files) return;  // an older kiri's state
  KIRI_CHECK_KIND(kCheckpoint, sum != state.end(), where,
                  " has a manifest ('files') but no 'checksum': it was edited or damaged");
  KIRI_CHECK_KIND(kCheckpoint, has_files, where,
                  " has a 'checksum' but no manifest ('files'): it was edited or damaged");
  const std::string want = sum->is_string() ? sum->get<std::string>() : sum->dump();
  const std::string got = state_checksum(state);
  KIRI_CHECK_KIND(kCheckpoint, got == want, where, " fails its checksum: it says ",
                  quote_bounded(want, 80), ", its content hashes to ", got,
                  " (the file was edited or is damaged)");
  KIRI_CHECK_KIND(kCheckpoint, state[kFiles].is_object(), where, ": files must be an object, got ",
                  state[kFiles].type_name());
}

void verify_checkpoint_files(const std::string& dir, const CheckpointState& state) {
  if (state.files.is_null()) return;  // an older kiri's checkpoint
  for (const auto& [name, entry] : state.files.items()) verify_file(dir, name, entry, state);
}

std::string find_resume_checkpoint(const std::string& root, std::string* note) {
  note->clear();
  std::error_code ec;
  const bool has_latest = fs::exists(fs::path(root) / "latest", ec);
  const std::vector<int64_t> steps = ckpt::list_checkpoints(root);
  if (!has_latest && steps.empty()) return "";
  std::string why = str("there is no ", root, "/latest");
  if (has_latest) {
    try {
      std::string dir = ckpt::resolve_checkpoint(root);
      read_checkpoint_state(dir);  // the state and the files of its manifest
      // A save killed after its folder's rename, before `latest` named it: follow the chain.
      for (int hops = 0; hops < 1000; ++hops) {
        const std::string next = committed_after(root, dir, steps);
        if (next.empty()) break;
        *note = str(root, "/latest names ", dir, ", but ", next,
                    " was committed after it (a save stopped before `latest` was written): "
                    "resuming from ",
                    next);
        dir = next;
      }
      return dir;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCheckpoint) throw;
      why = e.message();
    }
  }
  std::string defects;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string dir = (fs::path(root) / ckpt::step_dir_name(*it)).string();
    try {
      read_checkpoint_state(dir);
      *note = str(why, ": resuming from ", dir, ", the newest complete checkpoint");
      return dir;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCheckpoint) throw;
      defects += str("; ", e.message());
    }
  }
  KIRI_RAISE(kCheckpoint, "no complete checkpoint in ", root, ": ", why, defects);
}

}  // namespace kiri::ckpt
