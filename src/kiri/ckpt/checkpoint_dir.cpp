#include "kiri/ckpt/checkpoint_dir.h"

#include <fcntl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/base/file_read.h"

namespace kiri::ckpt {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / ("." + step_dir_name(step) + ".tmp")).string();
}

namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kState = "state.json";
// `latest` holds one step directory's name and a newline.
constexpr uint64_t kMaxLatestBytes = 4096;

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) KIRI_RAISE(kIo, "cannot remove ", path.string(), ": ", ec.message());
}

void rename_or_raise(const fs::path& from, const fs::path& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    KIRI_RAISE(kIo, "cannot rename ", from.string(), " to ", to.string(), ": ",
               std::strerror(errno));
}

// fsyncs every file and directory below dir, then dir itself, so the rename
// that publishes dir cannot expose files whose data is not yet on disk.
void fsync_tree(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_status s = it->symlink_status(ec);
    if (!ec && (fs::is_regular_file(s) || fs::is_directory(s))) fsync_path(it->path().string());
  }
  if (ec) KIRI_RAISE(kIo, "cannot list ", dir.string(), ": ", ec.message());
  fsync_path(dir.string());
}

// Moves the finished temporary directory onto an existing step directory of
// the same step. RENAME_EXCHANGE swaps the two atomically; filesystems
// without it get a rename-aside, which briefly leaves no step directory.
void replace_dir(const fs::path& tmp, const fs::path& final_dir) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(tmp);  // now holds the old checkpoint
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    KIRI_RAISE(kIo, "cannot swap ", tmp.string(), " with ", final_dir.string(), ": ",
               std::strerror(errno));
  const fs::path old = final_dir.parent_path() / ("." + final_dir.filename().string() + ".old");
  remove_tree(old);
  rename_or_raise(final_dir, old);
  rename_or_raise(tmp, final_dir);
  remove_tree(old);
}

// A name this protocol gives an entry of root: step_N, .step_N.tmp, .step_N.old, latest.
bool is_protocol_entry(const std::string& name) {
  auto digits = [&](size_t from, size_t to) {
    return to > from && name.find_first_not_of("0123456789", from) >= to;
  };
  if (name == kLatest) return true;
  if (name.rfind("step_", 0) == 0) return digits(5, name.size());
  if (name.rfind(".step_", 0) != 0 || name.size() < 10) return false;
  const std::string ext = name.substr(name.size() - 4);
  return (ext == ".tmp" || ext == ".old") && digits(6, name.size() - 4);
}

// step_ and 1 to 18 digits: the names step_dir_name gives (and list_checkpoints reads).
bool is_step_dir_name(const std::string& name) {
  return name.size() > 5 && name.size() <= 5 + 18 && name.rfind("step_", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

void prune(const std::string& root, int64_t committed, int keep_last) {
  std::vector<int64_t> steps = list_checkpoints(root);
  // Only this run's steps: those past the committed one are an earlier, longer attempt's
  // that this run resumed from before their end. Counting them would remove this run's own
  // newest checkpoints (the one `latest` names among them) in favour of the stale ones.
  std::erase_if(steps, [&](int64_t s) { return s > committed; });
  const size_t keep = static_cast<size_t>(keep_last);
  for (size_t i = 0; i + keep < steps.size(); ++i)
    if (steps[i] != committed) remove_tree(fs::path(root) / step_dir_name(steps[i]));
}

}  // namespace

std::string step_dir_name(int64_t step) {
  KIRI_CHECK(step >= 0, "checkpoint step ", step, " is negative");
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string begin_checkpoint(const std::string& root, int64_t step) {
  const std::string tmp = temp_dir(root, step);
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) KIRI_RAISE(kIo, "cannot create checkpoint root ", root, ": ", ec.message());
  remove_tree(tmp);  // a stale one from a crashed save
  fs::create_directory(tmp, ec);
  if (ec) KIRI_RAISE(kIo, "cannot create ", tmp, ": ", ec.message());
  return tmp;
}

std::string commit_checkpoint(const std::string& root, int64_t step, int keep_last) {
  const fs::path tmp = temp_dir(root, step);
  const fs::path final_dir = fs::path(root) / step_dir_name(step);
  std::error_code ec;
  if (!fs::is_directory(tmp, ec))
    KIRI_RAISE(kCheckpoint, "cannot commit step ", step, ": ", tmp.string(),
               " does not exist (begin_checkpoint was not called)");
  if (!fs::is_regular_file(tmp / kState, ec))
    KIRI_RAISE(kCheckpoint, "cannot commit step ", step, ": ", (tmp / kState).string(),
               " is missing; a checkpoint is complete only with its state.json");
  fsync_tree(tmp);
  if (fs::exists(final_dir, ec))
    replace_dir(tmp, final_dir);
  else
    rename_or_raise(tmp, final_dir);
  fsync_path(root);
  write_file_atomic((fs::path(root) / kLatest).string(), step_dir_name(step) + "\n");
  if (keep_last > 0) prune(root, step, keep_last);
  return final_dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  // A state.json that is not a regular file (a FIFO, a directory) is still this step's:
  // reading it names what it is.
  if (fs::exists(p / kState, ec)) return path;
  if (!fs::exists(p / kLatest, ec)) {
    if (!fs::exists(p, ec))
      KIRI_RAISE(kCheckpoint, "no checkpoint in ", path, ": it does not exist");
    KIRI_RAISE(kCheckpoint, "no checkpoint in ", path, ": neither ", kState, " nor ", kLatest);
  }
  const std::string latest = (p / kLatest).string();
  std::string name =
      read_small_file(latest, kMaxLatestBytes, ErrorKind::kCheckpoint, "checkpoint pointer");
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  // Only a committed step directory: never a temporary one (.step_N.tmp), a path or '..'.
  if (!is_step_dir_name(name))
    KIRI_RAISE(kCheckpoint, latest, " holds '", quote_bounded(name, 80),
               "', not the name of a step directory (step_NNNNNNNN)");
  const fs::path dir = p / name;
  if (!fs::exists(dir / kState, ec))
    KIRI_RAISE(kCheckpoint, latest, " names ", name, ", but ", (dir / kState).string(),
               " does not exist");
  return dir.string();
}

std::vector<std::string> remove_stale_temp_dirs(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_protocol_entry(name) && name.size() > 4 && name.substr(name.size() - 4) == ".tmp")
      removed.push_back(it->path().string());
  }
  if (ec) KIRI_RAISE(kIo, "cannot list checkpoint root ", root, ": ", ec.message());
  std::sort(removed.begin(), removed.end());
  for (const std::string& p : removed) remove_tree(p);
  return removed;
}

std::vector<int64_t> list_checkpoints(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return steps;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string digits = name.size() > 5 ? name.substr(5) : "";
    if (name.rfind("step_", 0) != 0 || digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos || !it->is_directory(ec))
      continue;
    steps.push_back(std::stoll(digits));
  }
  if (ec) KIRI_RAISE(kIo, "cannot list checkpoint root ", root, ": ", ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> remove_checkpoints(const std::string& root) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return removed;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (is_protocol_entry(it->path().filename().string())) removed.push_back(it->path().string());
  if (ec) KIRI_RAISE(kIo, "cannot list checkpoint root ", root, ": ", ec.message());
  std::sort(removed.begin(), removed.end());
  for (const std::string& p : removed) remove_tree(p);
  return removed;
}

}  // namespace kiri::ckpt
