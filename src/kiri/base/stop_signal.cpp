#include "kiri/base/stop_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

namespace kiri {

namespace {

// Process-wide by nature: what signal handlers read and set.
volatile std::sig_atomic_t g_requested = 0;
volatile std::sig_atomic_t g_guarded = 0;
char g_term_record[4096];

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};
struct sigaction g_previous[3];

void write_stderr(const char* text) {
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
}

void record_sigterm(int sig) {
  if (sig != SIGTERM || !g_term_record[0]) return;
  const int fd = ::open(g_term_record, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  const char text[] = "SIGTERM\n";
  [[maybe_unused]] const ssize_t n = ::write(fd, text, sizeof text - 1);
  ::close(fd);
}

void die_of(int sig) {
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

extern "C" void on_stop_signal(int sig) {
  record_sigterm(sig);
  if (!g_guarded || g_requested) {
    if (g_guarded) write_stderr("[kiri] a second stop signal: stopping at once\n");
    die_of(sig);
    return;
  }
  g_requested = sig;
  write_stderr(
      "[kiri] stop requested: saving a checkpoint at the next step boundary, then exiting "
      "(send the signal again to stop at once)\n");
}

}  // namespace

StopSignals::StopSignals() {
  g_requested = 0;
  g_guarded = 1;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or poll the signal lands in goes on
  for (int i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &sa, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
  g_guarded = 0;
}

int stop_signal_requested() {
  return g_requested;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal " + std::to_string(sig);
  }
}

void set_sigterm_record(const std::string& path) {
  if (path.size() >= sizeof g_term_record) return;
  std::memcpy(g_term_record, path.c_str(), path.size() + 1);
  if (!path.empty() && !g_guarded) {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
}

}  // namespace kiri
