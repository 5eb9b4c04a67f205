#include "kiri/launch/status.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiri/base/atomic_file.h"
#include "kiri/base/stop_signal.h"
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
  // Recorded by base's handler before it dies of the signal, or, under train's StopSignals
  // guard, before it saves and exits.
  set_sigterm_record(status_file("term"));
}

void record_launch_error(const std::string& kind, int code, const std::string& text) {
  write_record(status_file("error"), str(kind, "\n", code, "\n", text, "\n"));
}

void record_launch_unreachable(const std::vector<int>& ranks, std::optional<bool> reached) {
  std::string text = reached ? (*reached ? "1\n" : "0\n") : "-\n";
  for (size_t i = 0; i < ranks.size(); ++i) text += str(i ? " " : "", ranks[i]);
  write_record(status_file("unreachable"), text + "\n");
}

std::optional<bool> reaches_launcher(double timeout_s) {
  const char* uri = std::getenv("OMPI_MCA_orte_hnp_uri");  // "JOBID.0;tcp://A.B.C.D:PORT;..."
  if (!uri) return std::nullopt;
  const std::string u = uri;
  const size_t at = u.find("tcp://");
  if (at == std::string::npos) return std::nullopt;
  const size_t colon = u.find(':', at + 6), end = u.find_first_of(";,", at);
  if (colon == std::string::npos) return std::nullopt;
  const std::string host = u.substr(at + 6, colon - at - 6);
  const int port = std::atoi(u.substr(colon + 1, end - colon - 1).c_str());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (port <= 0 || ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return std::nullopt;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
    int err = 0;
    socklen_t len = sizeof err;
    rc = rc == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
  }
  ::close(fd);
  return rc == 0;
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
    if (const std::string s = read_text(base.string() + ".unreachable"); !s.empty()) {
      std::istringstream in(s);
      std::string reached;
      in >> reached;
      if (reached == "0" || reached == "1") o.reached_launcher = reached == "1";
      for (int x; in >> x;) o.unreachable.push_back(x);
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
