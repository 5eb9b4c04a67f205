#include "kiri/launch/attempt.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "kiri/base/error.h"
#include "kiri/base/timer.h"

namespace kiri::launch {

namespace {

// How long the ranks on this host may outlive the launcher before they are killed.
constexpr double kGoneTimeoutS = 30;
// After a rank has reported an error, how long the launcher may take to end the job (mpirun
// aborts it within a second or two) before it is ended from here: across hosts, mpirun can
// hang in the abort when one host's link is down and its daemon cannot be reached. Then
// SIGTERM, and SIGKILL if that does not end it either.
constexpr double kAbortGraceS = 8;
constexpr double kTermGraceS = 3;
// After every rank recorded its exit 0 (before MPI_Finalize): the same for a launcher that
// does not exit, with time for a slow finalize.
constexpr double kFinishedGraceS = 30;
constexpr int kPollMs = 100;

// The supervisor's signal count: a handler may only set it. Process-wide by nature.
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop(int) {
  g_stop = g_stop + 1;
}

std::string this_host() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// The state letter of /proc/PID/stat ('R', 'S', 'T', 'Z', ...), or 0 when the process is gone.
char process_state(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!in || !std::getline(in, s)) return 0;
  const size_t close = s.rfind(')');
  return close != std::string::npos && close + 2 < s.size() ? s[close + 2] : 0;
}

bool has_record(const std::string& dir, int rank, const char* suffix) {
  return ::access((dir + "/rank_" + std::to_string(rank) + "." + suffix).c_str(), F_OK) == 0;
}

// The first rank whose error record (rank_R.error) is in `dir`, or -1.
int first_error(const std::string& dir, int ranks) {
  for (int r = 0; r < ranks; ++r)
    if (has_record(dir, r, "error")) return r;
  return -1;
}

// Whether every rank recorded that it finished (rank_R.exit "0").
bool all_finished(const std::string& dir, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    std::ifstream in(dir + "/rank_" + std::to_string(r) + ".exit");
    int code = -1;
    if (!(in >> code) || code != 0) return false;
  }
  return true;
}

bool alive(long pid) {
  const char st = process_state(pid);
  return st != 0 && st != 'Z' && st != 'X';  // a zombie has exited: its parent reaps it
}

std::string exe_of(long pid) {
  char buf[PATH_MAX];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// pid and host of a rank's rank_R.start, if written.
std::optional<std::pair<long, std::string>> start_record(const std::string& dir, int r) {
  std::ifstream in(dir + "/rank_" + std::to_string(r) + ".start");
  long pid = 0;
  std::string host;
  if (in >> pid >> host) return std::pair{pid, host};
  return std::nullopt;
}

pid_t spawn(const std::vector<std::string>& command, const std::map<std::string, std::string>& env,
            int err_fd) {
  const pid_t child = ::fork();
  KIRI_CHECK_KIND(kIo, child >= 0, "cannot fork to start ", command[0], ": ", std::strerror(errno));
  if (child > 0) return child;
  // A process group of its own, so that a terminal's Ctrl-C reaches the supervisor alone,
  // which relays it as a stop request (run_attempt), and not mpirun, which would end the
  // ranks at once. Out of the terminal's foreground group it must not read the terminal
  // either (SIGTTIN would stop it): the ranks' stdin is /dev/null, as no kiri verb reads it.
  ::setpgid(0, 0);
  if (const int null = ::open("/dev/null", O_RDONLY); null >= 0) ::dup2(null, STDIN_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& s : command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "kiri: I/O error: cannot start %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// Ends a launcher that outlives a rank's error by kAbortGraceS, or its ranks' finish by
// kFinishedGraceS (see there); poll() each round.
struct StuckLauncher {
  int error_rank_ = -1;
  bool finished_ = false;  // every rank recorded its exit 0
  bool termed_ = false, killed_ = false;
  Timer since_check_, since_error_;
  void poll(pid_t child, const std::string& status_dir, int ranks, AttemptResult& res);
};

void StuckLauncher::poll(pid_t child, const std::string& status_dir, int ranks,
                         AttemptResult& res) {
  if (error_rank_ < 0 && !finished_) {
    if (since_check_.seconds() < 0.5) return;
    since_check_.reset();
    if ((error_rank_ = first_error(status_dir, ranks)) >= 0 ||
        (finished_ = all_finished(status_dir, ranks)))
      since_error_.reset();
    return;
  }
  const double waited = since_error_.seconds();
  const double grace = finished_ ? kFinishedGraceS : kAbortGraceS;
  if (!termed_ && waited > grace) {
    const std::string what = finished_
                                 ? std::string("every rank finished")
                                 : "rank " + std::to_string(error_rank_) + " reported an error";
    std::fprintf(stderr,
                 "[kiri] launch: %s %.0f s ago and the launcher has not ended the job (a host "
                 "it cannot reach?): ending it (SIGTERM)\n",
                 what.c_str(), waited);
    res.ranks_finished = finished_;
    ::kill(child, SIGTERM);
    termed_ = true;
    res.launcher_ended = true;
  } else if (termed_ && !killed_ && waited > grace + kTermGraceS) {
    std::fprintf(stderr, "[kiri] launch: the launcher ignored SIGTERM: SIGKILL\n");
    ::kill(child, SIGKILL);
    killed_ = true;
  }
}

// The ranks on this host must be gone before the next attempt takes the run folder: waits
// for them, then kills those still running this binary (never a reused pid).
void wait_gone(const std::map<int, long>& local, const std::string& self, AttemptResult& res) {
  Timer gone;
  auto any_alive = [&] {
    for (const auto& [r, pid] : local)
      if (alive(pid)) return true;
    return false;
  };
  while (any_alive() && gone.seconds() < kGoneTimeoutS)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (const auto& [r, pid] : local)
    if (alive(pid) && exe_of(pid) == self) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
      ++res.killed_leftovers;
    }
  while (any_alive() && gone.seconds() < kGoneTimeoutS + 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  res.wait_gone_s = gone.seconds();
}

}  // namespace

namespace {
bool dashes(const std::string& line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string::npos;
}
bool opens_banner(const std::string& line) {
  for (const char* start : {"MPI_ABORT was invoked", "Primary job  terminated normally",
                            "mpirun detected that one or more processes exited",
                            "mpirun has exited due to process rank", "mpirun noticed that"})
    if (line.rfind(start, 0) == 0) return true;
  return false;
}
}  // namespace

std::vector<std::string> LauncherNoise::feed(const std::string& line) {
  if (in_banner_) {
    if (dashes(line)) in_banner_ = false;  // its closing line
    return {};
  }
  if (line.find("ORTE_ERROR_LOG") != std::string::npos) return {};
  if (held_) {
    std::string held = *held_;
    held_.reset();
    if (opens_banner(line)) {
      in_banner_ = true;
      return {};
    }
    if (dashes(line)) {
      held_ = line;
      return {held};
    }
    return {held, line};
  }
  if (dashes(line)) {
    held_ = line;
    return {};
  }
  return {line};
}

std::vector<std::string> LauncherNoise::flush() {
  std::vector<std::string> out;
  if (held_) out.push_back(*held_);
  held_.reset();
  return out;
}

namespace {

// The launcher's stderr, passed through line by line (less its noise, unless verbose), and
// read for mpirun's notice of a rank that a signal ended.
struct StderrPump {
  StderrPump(int fd_, bool verbose_) : fd(fd_), verbose(verbose_) {}
  int fd;
  bool verbose;
  std::string line;  // what is not yet a whole line
  LauncherNoise noise;
  const std::regex noticed{R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))"};

  static void echo(const std::vector<std::string>& lines) {
    for (const std::string& l : lines) {
      const std::string out = l + "\n";
      [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, out.data(), out.size());
    }
  }
  // Waits up to kPollMs for output and passes it on; false at the end of the stream.
  bool poll(AttemptResult& res) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0) return true;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    line.append(buf, static_cast<size_t>(n));
    for (size_t at; (at = line.find('\n')) != std::string::npos; line.erase(0, at + 1)) {
      std::smatch m;
      const std::string l = line.substr(0, at);
      if (!res.noticed && std::regex_search(l, m, noticed))
        res.noticed = std::pair{std::stoi(m[1]), std::stoi(m[2])};
      echo(verbose ? std::vector<std::string>{l} : noise.feed(l));
    }
    return true;
  }
  void finish() {
    echo(noise.flush());
    if (!line.empty()) echo({line});  // a last line without its newline
  }
};

// The first SIGTERM or SIGINT: a stop request to every rank, which mpirun forwards as SIGUSR1
// (the ranks save a checkpoint at their next step boundary and exit, base/stop_signal.h); a
// second one: the launcher ends its ranks at once.
void relay_stop(pid_t child, std::sig_atomic_t& relayed, AttemptResult& res) {
  if (g_stop <= relayed) return;
  ::kill(child, g_stop == 1 ? SIGUSR1 : SIGTERM);
  if (g_stop == 1)
    std::fprintf(stderr,
                 "[kiri] launch: stop requested: the ranks save a checkpoint at their next step "
                 "boundary and exit (a second signal ends them at once)\n");
  relayed = g_stop;
  res.interrupted = true;
}

}  // namespace

bool stop_requested() {
  return g_stop != 0;
}

AttemptResult run_attempt(const std::vector<std::string>& command,
                          const std::map<std::string, std::string>& env,
                          const std::string& status_dir, int ranks, bool verbose) {
  ::signal(SIGTERM, on_stop);
  ::signal(SIGINT, on_stop);
  int fds[2];
  KIRI_CHECK_KIND(kIo, ::pipe(fds) == 0, "cannot make a pipe: ", std::strerror(errno));
  Timer timer;
  const pid_t child = spawn(command, env, fds[1]);
  ::close(fds[1]);
  AttemptResult res;
  const std::string host = this_host();
  const std::string self = exe_of(::getpid());
  std::map<int, long> local;  // rank -> pid, for the ranks started on this host
  StderrPump pump(fds[0], verbose);
  bool exited = false, eof = false;
  std::sig_atomic_t relayed = 0;  // the stop signals passed on to the launcher
  int status = 0;
  Timer since_exit;
  StuckLauncher stuck;
  while (!(exited && (eof || since_exit.seconds() > 2))) {
    if (!eof)
      eof = !pump.poll(res);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
    for (int r = 0; r < ranks; ++r)
      if (!local.count(r))
        if (auto rec = start_record(status_dir, r); rec && rec->second == host)
          local[r] = rec->first;
    for (const auto& [r, pid] : local) {
      const char st = process_state(pid);
      if (st == 'T' || st == 't') res.stopped.insert(r);
    }
    if (!exited) stuck.poll(child, status_dir, ranks, res);
    relay_stop(child, relayed, res);
    if (!exited && ::waitpid(child, &status, WNOHANG) == child) {
      exited = true;
      since_exit.reset();
    }
  }
  ::close(fds[0]);
  pump.finish();
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (res.launcher_ended && res.ranks_finished && !res.interrupted) res.exit_code = 0;
  res.seconds = timer.seconds();
  wait_gone(local, self, res);
  return res;
}

}  // namespace kiri::launch
