#include "kiri/train/run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include <nlohmann/json.hpp>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/ckpt/checkpoint_dir.h"

namespace kiri::train {

namespace fs = std::filesystem;

namespace {

// The metrics rows by step (a step written twice: the later row), and how many
// lines did not parse (a torn last line after a crash).
struct MetricsRows {
  std::map<int64_t, std::string> lines;
  std::map<int64_t, nlohmann::json> rows;
  int64_t total = 0, unreadable = 0;
};

MetricsRows read_metrics(const std::string& path, bool keep_json) {
  MetricsRows out;
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return out;
  std::ifstream in(path);
  KIRI_CHECK_KIND(kIo, in.good(), "cannot read the metrics file '", path, "'");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    ++out.total;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      ++out.unreadable;
      continue;
    }
    const int64_t step = j["step"].get<int64_t>();
    out.lines[step] = line;
    if (keep_json) out.rows[step] = j;
  }
  return out;
}

// Whether `path` lies inside `dir` (both made absolute, `..` resolved).
bool inside(const std::string& path, const std::string& dir) {
  if (path.empty() || dir.empty()) return false;
  const fs::path p = fs::weakly_canonical(fs::absolute(path));
  const fs::path d = fs::weakly_canonical(fs::absolute(dir));
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing '/'
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

bool remove_path(const fs::path& p, std::vector<std::string>& removed) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(p, ec))) return false;
  fs::remove_all(p, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot remove ", p.string(), ": ", ec.message());
  removed.push_back(p.string());
  return true;
}

// The holder a lock file records (one JSON line); pid 0 when it records none.
struct LockRecord {
  int64_t pid = 0;
  std::string host, since;
  std::string describe() const {
    return str("pid ", pid, " on host ", host.empty() ? "?" : host, " since ",
               since.empty() ? "?" : since);
  }
};

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What the lock file open as `fd` records (a few hundred bytes; more is not ours).
LockRecord read_record(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  LockRecord r;
  if (n <= 0) return r;
  const nlohmann::json j =
      nlohmann::json::parse(std::string(buf, static_cast<size_t>(n)), nullptr, false);
  if (!j.is_object()) return r;
  if (j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<int64_t>();
  if (j.contains("host") && j["host"].is_string())
    r.host = quote_bounded(j["host"].get<std::string>(), 100);
  if (j.contains("since") && j["since"].is_string())
    r.since = quote_bounded(j["since"].get<std::string>(), 40);
  return r;
}

void write_record(int fd, const std::string& file) {
  const std::string line =
      nlohmann::json{
          {"pid", static_cast<int64_t>(::getpid())}, {"host", this_host()}, {"since", utc_now()}}
          .dump() +
      "\n";
  const bool ok = ::ftruncate(fd, 0) == 0 &&
                  ::pwrite(fd, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size());
  KIRI_CHECK_KIND(kIo, ok, "cannot write the lock file ", file, ": ", std::strerror(errno));
}

bool alive_here(const LockRecord& r) {
  if (r.pid <= 0 || r.host != this_host()) return false;
  return ::kill(static_cast<pid_t>(r.pid), 0) == 0 || errno == EPERM;
}

[[noreturn]] void raise_in_use(const std::string& dir, const std::string& file, const LockRecord& r,
                               const char* how) {
  KIRI_RAISE(kConfig, dir, " is in use by ",
             r.pid > 0 ? r.describe() : std::string("another process"), " (lock file ", file, how,
             "); wait for that run to end, or give this run another run.dir");
}

// flock(2) cannot work on this file's filesystem (as opposed to: someone holds it).
bool no_flock(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS;
}

}  // namespace

std::string RunDirContents::describe() const {
  std::string s;
  if (!checkpoints.empty())
    s = str("checkpoints up to step ", checkpoints.back());
  else if (latest)
    s = "a checkpoint root";
  if (metrics_rows > 0)
    s += str(s.empty() ? "" : ", ", "metrics up to step ", metrics_last_step,
             checkpoints.empty() && !latest ? ", no checkpoint" : "");
  return s;
}

RunDirContents inspect_run_dir(const RunConfig& cfg) {
  RunDirContents c;
  if (!cfg.checkpoint.dir.empty()) {
    c.checkpoints = ckpt::list_checkpoints(cfg.checkpoint.dir);
    std::error_code ec;
    c.latest = fs::exists(fs::path(cfg.checkpoint.dir) / "latest", ec);
  }
  const MetricsRows m = read_metrics(cfg.log.metrics, false);
  c.metrics_rows = static_cast<int64_t>(m.lines.size());
  if (!m.lines.empty()) c.metrics_last_step = m.lines.rbegin()->first;
  return c;
}

void refuse_used_run_dir(const RunConfig& cfg) {
  const RunDirContents c = inspect_run_dir(cfg);
  if (!c.holds_a_run()) return;
  std::string where = cfg.run.dir;
  if (!inside(cfg.checkpoint.dir, cfg.run.dir) && !cfg.checkpoint.dir.empty() &&
      (c.latest || !c.checkpoints.empty()))
    where = cfg.checkpoint.dir;
  else if (c.checkpoints.empty() && !c.latest && !inside(cfg.log.metrics, cfg.run.dir))
    where = cfg.log.metrics;
  KIRI_RAISE(kConfig, where, " already holds a run (", c.describe(),
             "); continue it with --resume auto, or start over with --overwrite");
}

std::vector<std::string> clear_run_dir(const RunConfig& cfg) {
  const std::string& root = cfg.checkpoint.dir;
  std::vector<std::string> removed =
      root.empty() ? std::vector<std::string>{} : ckpt::remove_checkpoints(root);
  for (const std::string& file :
       {cfg.log.metrics, plot_path(cfg.log), (fs::path(cfg.run.dir) / "config.json").string(),
        (fs::path(cfg.run.dir) / "metrics.csv").string()})
    if (inside(file, cfg.run.dir) || inside(file, root)) remove_path(file, removed);
  // log.tensorboard's event files (each start adds one): the old run's curves would
  // otherwise show beside the new one's.
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(cfg.run.dir, ec))
    if (e.path().filename().string().starts_with("events.out.tfevents."))
      remove_path(e.path(), removed);
  return removed;
}

RunLock::~RunLock() {
  for (const Held& h : held_) {
    ::unlink(h.file.c_str());  // before the close: a waiter that opened it sees a new inode
    if (h.fd >= 0) ::close(h.fd);
  }
}

std::vector<std::string> RunLock::files() const {
  std::vector<std::string> out;
  for (const Held& h : held_) out.push_back(h.file);
  return out;
}

void RunLock::acquire(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the folder ", dir, " to lock it: ", ec.message());
  const std::string file = (fs::path(dir) / kFileName).string();
  // The holder removes the file on exit; a file opened before that is a stale
  // inode, so retry until the locked file is the one at the path.
  for (int attempt = 0; attempt < 10; ++attempt) {
    Held h{file,
           ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644)};
    KIRI_CHECK_KIND(kIo, h.fd >= 0, "cannot open the lock file ", file, ": ", std::strerror(errno));
    try {
      if (lock_or_judge(h, dir)) {
        held_.push_back(h);
        return;
      }
    } catch (...) {
      ::close(h.fd);
      throw;
    }
    ::close(h.fd);  // the previous holder removed it meanwhile
  }
  KIRI_RAISE(kIo, "cannot lock ", file, ": it was replaced 10 times while locking it");
}

bool RunLock::lock_or_judge(Held& h, const std::string& dir) {
  struct stat st {};
  KIRI_CHECK_KIND(kIo, ::fstat(h.fd, &st) == 0 && S_ISREG(st.st_mode), "the lock file ", h.file,
                  " is not a regular file");
  const LockRecord r = read_record(h.fd);
  if (::flock(h.fd, LOCK_EX | LOCK_NB) == 0) {
    struct stat now {};
    if (::stat(h.file.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
      return false;
    if (r.pid > 0 && r.pid != ::getpid())
      log::info("run folder ", dir, ": the lock file left by ", r.describe(),
                " is stale (that process holds no lock): taking it over");
  } else {
    const int err = errno;
    if (err == EWOULDBLOCK) raise_in_use(dir, h.file, r, "");
    KIRI_CHECK_KIND(kIo, no_flock(err), "cannot lock ", h.file, ": ", std::strerror(err));
    if (r.pid > 0 && r.pid != ::getpid() && (r.host != this_host() || alive_here(r)))
      raise_in_use(dir, h.file, r, ", judged by its record: the filesystem has no flock");
    log::warn(dir, "'s filesystem has no flock (", std::strerror(err),
              "): the folder is locked by the record in ", h.file,
              " alone, which a run starting at the same moment can miss");
    ::close(h.fd);
    h.fd = -1;
    const int fd = ::open(h.file.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    KIRI_CHECK_KIND(kIo, fd >= 0, "cannot open the lock file ", h.file, ": ", std::strerror(errno));
    try {
      write_record(fd, h.file);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return true;
  }
  try {  // the flock is the lock; the record only names the holder to a second writer
    write_record(h.fd, h.file);
  } catch (const Error& e) {
    log::warn(e.message(), " (the folder is locked all the same)");
  }
  return true;
}

RunLock lock_run_folder(const RunConfig& paths, comm::Communicator& world) {
  RunLock lock;
  bool failed = false;
  ErrorKind kind = ErrorKind::kIo;
  std::string message;
  if (world.rank() == 0) {
    try {
      lock.acquire(paths.run.dir);
      if (!paths.checkpoint.dir.empty() && !inside(paths.checkpoint.dir, paths.run.dir))
        lock.acquire(paths.checkpoint.dir);
    } catch (const Error& e) {
      failed = true;
      kind = e.kind();
      message = e.message();
    } catch (const std::exception& e) {
      failed = true;
      message = str("cannot lock the run folder ", paths.run.dir, ": ", e.what());
    }
  }
  if (world.size() > 1) {
    // [failed, kind, message...]: one fixed-size broadcast, the message cut to fit.
    Allocator alloc;
    Tensor t = Tensor::empty({2048}, DType::kU8, Category::kOther, alloc);
    uint8_t* b = t.data<uint8_t>();
    std::memset(b, 0, 2048);
    if (world.rank() == 0) {
      b[0] = failed ? 1 : 0;
      b[1] = static_cast<uint8_t>(kind);
      std::memcpy(b + 2, message.data(), std::min<size_t>(message.size(), 2045));
    }
    world.broadcast(t, 0);
    failed = b[0] != 0;
    kind = static_cast<ErrorKind>(b[1]);
    message.assign(reinterpret_cast<const char*>(b + 2),
                   strnlen(reinterpret_cast<const char*>(b + 2), 2045));
  }
  if (failed) raise(kind, message, __FILE__, __LINE__);
  return lock;
}

std::string write_run_config(const RunConfig& cfg, const std::string& json) {
  std::error_code ec;
  fs::create_directories(cfg.run.dir, ec);
  KIRI_CHECK_KIND(kIo, !ec, "cannot create the run folder ", cfg.run.dir, ": ", ec.message());
  const std::string path = (fs::path(cfg.run.dir) / "config.json").string();
  write_file_atomic(path, json + "\n");
  return path;
}

int64_t keep_metrics_through(const std::string& path, int64_t step) {
  const MetricsRows m = read_metrics(path, false);
  std::string kept;
  int64_t rows = 0;
  for (const auto& [s, line] : m.lines)
    if (s >= 1 && s <= step) {
      kept += line + "\n";
      ++rows;
    }
  const int64_t dropped = m.total - rows;
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

LossHistory read_loss_history(const std::string& metrics_path) {
  LossHistory h;
  for (const auto& [step, j] : read_metrics(metrics_path, true).rows) {
    if (j.contains("loss") && j["loss"].is_number()) {
      h.steps.push_back(static_cast<double>(step));
      h.loss.push_back(j["loss"].get<double>());
    }
    if (j.contains("val_loss") && j["val_loss"].is_number()) {
      h.val_steps.push_back(static_cast<double>(step));
      h.val_loss.push_back(j["val_loss"].get<double>());
    }
  }
  return h;
}

std::vector<plot::Series> loss_plot_series(const LossHistory& h) {
  return {{"train", h.steps, h.loss, 0x1f77b4}, {"validation", h.val_steps, h.val_loss, 0xd62728}};
}

}  // namespace kiri::train
