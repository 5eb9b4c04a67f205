#include "kiri/launch/status.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiri/base/atomic_file.h"
#include "kiri/launch/world.h"

namespace kiri::launch {

namespace {

// The rank's folder and number, or "" outside a supervised job.
std::string status_file(const char* suffix) {
  const char* dir = std::getenv(kLaunchStatusEnv);
  const int rank = job_rank();
  if (!dir || !*dir || rank < 0) return "";
  return str(dir, "/rank_", rank, ".", suffix);
}

// Best effort: a record that cannot be written must not hide the error being reported.
void write_record(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  try {
    write_file_atomic(path, text);
  } catch (const std::exception&) {
  }
}

// The SIGTERM record's path, made before the handler can run: a signal handler may only
// call async-signal-safe functions (open, write, close, signal, raise), so it cannot build it.
// The one piece of process-wide state here, as a signal handler needs.
char g_term_path[4096];

extern "C" void on_sigterm(int sig) {
  const int fd = ::open(g_term_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    const char text[] = "SIGTERM\n";
    [[maybe_unused]] const ssize_t n = ::write(fd, text, sizeof text - 1);
    ::close(fd);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void start_launch_status() {
  const std::string start = status_file("start");
  if (start.empty()) return;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  write_record(start, str(::getpid(), " ", host, "\n"));
  const std::string term = status_file("term");
  if (term.size() < sizeof g_term_path) {
    std::memcpy(g_term_path, term.c_str(), term.size() + 1);
    ::signal(SIGTERM, on_sigterm);
  }
}

void record_launch_error(const std::string& kind, int code, const std::string& text) {
  write_record(status_file("error"), str(kind, "\n", code, "\n", text, "\n"));
}

void record_launch_exit(int code) {
  write_record(status_file("exit"), str(code, "\n"));
}

std::vector<RankOutcome> read_launch_status(const std::string& dir, int ranks) {
  namespace fs = std::filesystem;
  std::vector<RankOutcome> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    RankOutcome& o = out[static_cast<size_t>(r)];
    o.rank = r;
    const fs::path base = fs::path(dir) / str("rank_", r);
    if (const std::string s = read_text(base.string() + ".start"); !s.empty()) {
      o.started = true;
      std::istringstream in(s);
      in >> o.pid >> o.host;
    }
    if (const std::string s = read_text(base.string() + ".error"); !s.empty()) {
      std::istringstream in(s);
      std::string kind, code, text;
      std::getline(in, kind);
      std::getline(in, code);
      std::getline(in, text);
      o.error_kind = kind;
      o.error_code = std::atoi(code.c_str());
      o.error_text = text;
    }
    o.terminated = !read_text(base.string() + ".term").empty();
    if (const std::string s = read_text(base.string() + ".exit"); !s.empty())
      o.exit_code = std::atoi(s.c_str());
  }
  return out;
}

bool retryable_error(const std::string& kind) {
  return kind == error_kind_name(ErrorKind::kCommTimeout) ||
         kind == error_kind_name(ErrorKind::kCommAborted) ||
         kind == error_kind_name(ErrorKind::kIo);
}

}  // namespace kiri::launch
