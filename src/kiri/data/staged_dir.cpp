#include "kiri/data/staged_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <csignal>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/base/log.h"

namespace kiri::data {

namespace fs = std::filesystem;

namespace {

// The folder a target path stands for: made absolute and, when it is a symlink (or under
// one), resolved, so the swap replaces the folder the link names and keeps the link.
fs::path resolve_target(const std::string& target) {
  std::error_code ec;
  if (target.empty()) KIRI_RAISE(kData, "the output folder is an empty path");
  fs::path p = fs::weakly_canonical(fs::absolute(target, ec), ec);
  // A dangling symlink stays unresolved above: follow it to the folder it will be.
  for (int hops = 0; !ec; ++hops) {
    std::error_code missing;  // a path that does not exist yet is no symlink
    if (fs::symlink_status(p, missing).type() != fs::file_type::symlink) break;
    if (hops == 40) ec = std::make_error_code(std::errc::too_many_symbolic_link_levels);
    if (!ec) p = fs::weakly_canonical(p.parent_path() / fs::read_symlink(p, ec), ec);
  }
  if (ec)
    KIRI_RAISE(kData, "cannot resolve the output folder ", target, ": ", ec.message(),
               " (a symlink loop, or a path through a file)");
  if (fs::exists(p, ec) && !fs::is_directory(p, ec))
    KIRI_RAISE(kData, "output folder ", target, " exists and is not a folder");
  if (!p.has_parent_path() || p == p.root_path())
    KIRI_RAISE(kData, "output folder ", target, " is the root: give a folder of its own");
  return p;
}

// A temporary folder's name: `.NAME.kiri-KIND-PID-N`, N counting this process's StagedDirs,
// since the ranks of one process (the thread test backend) prepare the same corpus at once.
std::string temp_name(const fs::path& target, const char* kind) {
  static std::atomic<uint64_t> made{0};
  return "." + target.filename().string() + ".kiri-" + kind + "-" + std::to_string(::getpid()) +
         "-" + std::to_string(made.fetch_add(1));
}

// The pid in a temporary folder's name `.NAME.kiri-KIND-PID-N` (or an older kiri's
// `...-PID`), or 0 when `entry` is not one of NAME's temporaries.
pid_t temp_owner(const std::string& entry, const std::string& name, const char* kind) {
  const std::string prefix = "." + name + ".kiri-" + kind + "-";
  if (entry.rfind(prefix, 0) != 0) return 0;
  const auto number = [](const std::string& s) {
    return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
  };
  const std::string rest = entry.substr(prefix.size());
  const size_t dash = rest.find('-');
  const std::string pid = rest.substr(0, dash);
  if (!number(pid) || (dash != std::string::npos && !number(rest.substr(dash + 1)))) return 0;
  return static_cast<pid_t>(std::strtol(pid.c_str(), nullptr, 10));
}

bool process_gone(pid_t pid) {
  return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
}

// Removes the temporaries of earlier runs for `target` whose process is gone. A missing
// target with an old folder beside it (a run killed between the fallback's two renames) gets
// that folder back first.
void clean_stale(const fs::path& target) {
  const std::string name = target.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(target.parent_path(), ec)) {
    const std::string entry = e.path().filename().string();
    const pid_t made = temp_owner(entry, name, "new"), old = temp_owner(entry, name, "old");
    if (old > 0 && process_gone(old) && !fs::exists(target)) {
      std::error_code rc;
      fs::rename(e.path(), target, rc);
      if (!rc) {
        log::warn("data: restored ", target.string(), " from ", e.path().string(),
                  ", left aside by a run that was killed while replacing it");
        continue;
      }
    }
    if ((made > 0 && process_gone(made)) || (old > 0 && process_gone(old))) {
      std::error_code rc;
      fs::remove_all(e.path(), rc);
      log::warn("data: removed ", e.path().string(), ", left by a run (process ", made + old,
                ") that did not finish", rc ? " (failed: " + rc.message() + ")" : std::string());
    }
  }
}

// Refuses a target that holds an entry the rewrite would delete without having written it.
void check_owned(const fs::path& target, const std::function<bool(const std::string&)>& ours) {
  std::error_code ec;
  if (!fs::is_directory(target, ec)) return;
  for (const auto& e : fs::directory_iterator(target, ec)) {
    const std::string entry = e.path().filename().string();
    if (!ours(entry))
      KIRI_RAISE(kData, "output folder ", target.string(), " holds ", entry,
                 ", which kiri data did not write: the rewrite replaces the whole folder, so "
                 "move it out or choose another --out");
  }
  if (ec) KIRI_RAISE(kData, "cannot list output folder ", target.string(), ": ", ec.message());
}

// renameat2(RENAME_EXCHANGE): 0, or the errno.
int exchange_paths(const std::string& a, const std::string& b) {
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0 ? 0 : errno;
}

}  // namespace

StagedDir::StagedDir(const std::string& target,
                     const std::function<bool(const std::string&)>& ours) {
  const fs::path t = resolve_target(target);
  target_ = t.string();
  std::error_code ec;
  fs::create_directories(t.parent_path(), ec);
  if (ec) KIRI_RAISE(kIo, "cannot create ", t.parent_path().string(), ": ", ec.message());
  clean_stale(t);
  check_owned(t, ours);
  staged_ = (t.parent_path() / temp_name(t, "new")).string();
  fs::remove_all(staged_, ec);  // a leftover of a killed run whose pid this one reuses
  if (!fs::create_directory(staged_, ec) || ec)
    KIRI_RAISE(kIo, "cannot create the temporary folder ", staged_, ": ",
               ec ? ec.message() : "it exists");
  data_fault_point(1);
}

StagedDir::~StagedDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staged_, ec);  // a failed rewrite leaves the target as it was
}

void StagedDir::commit() {
  fsync_path(staged_);
  const std::string parent = fs::path(target_).parent_path().string();
  std::error_code ec;
  // The ranks of one process commit the same corpus at once: a target another rank put in
  // place between the check and the rename is swapped instead, and a target another rank
  // moved aside for a moment is looked at again.
  int err = ENOENT;
  for (int attempt = 0; attempt < 8 && err == ENOENT; ++attempt) {
    if (!fs::exists(target_, ec)) {
      if (::rename(staged_.c_str(), target_.c_str()) == 0) {
        committed_ = true;
        fsync_path(parent);
        return;
      }
      if (errno != ENOTEMPTY && errno != EEXIST)
        KIRI_RAISE(kIo, "cannot rename ", staged_, " to ", target_, ": ", std::strerror(errno));
    }
    err = exchange_paths(staged_, target_);
  }
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
    // No exchange on this filesystem: the old folder goes aside, then the new one in.
    const std::string old = (fs::path(parent) / temp_name(target_, "old")).string();
    if (::rename(target_.c_str(), old.c_str()) != 0)
      KIRI_RAISE(kIo, "cannot rename ", target_, " to ", old, ": ", std::strerror(errno));
    if (::rename(staged_.c_str(), target_.c_str()) != 0) {
      const int e = errno;
      ::rename(old.c_str(), target_.c_str());  // put the old one back
      KIRI_RAISE(kIo, "cannot rename ", staged_, " to ", target_, ": ", std::strerror(e));
    }
    staged_ = old;  // what is left to remove
  } else if (err != 0) {
    KIRI_RAISE(kIo, "cannot swap ", staged_, " with ", target_, ": ", std::strerror(err));
  }
  // staged_ now holds the old folder; the new one is in place.
  committed_ = true;
  fsync_path(parent);
  data_fault_point(5);
  fs::remove_all(staged_, ec);
  if (ec) log::warn("data: could not remove the old folder ", staged_, ": ", ec.message());
}

void data_fault_point(int point) {
  const char* spec = std::getenv("KIRI_FAULT");
  int rank = -1, n = -1;
  if (!spec || std::sscanf(spec, "datakill:%d:%d", &rank, &n) != 2 || n != point) return;
  log::warn("KIRI_FAULT: killing kiri data at point ", point);
  ::raise(SIGKILL);
}

}  // namespace kiri::data
