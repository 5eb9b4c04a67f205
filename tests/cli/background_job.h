#pragma once
// A kiri job in the background, for the tests that signal, kill or stop its processes while it
// runs (restart_test.cpp, stop_signal_test.cpp), and what they read of its run folder.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "temp_dir.h"
#include "test_paths.h"

namespace kiri::testing {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A command ("VAR=value ... program args") run in the background in a process group of its
// own, its output in a file.
struct Background {
  pid_t pid = -1;
  std::string log;
  Background(const std::string& command, const std::string& log_path) : log(log_path) {
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      // exec: the command is this process (a signal to it reaches the command itself).
      ::execl("/bin/sh", "sh", "-c", ("exec env " + command + " > " + log_path + " 2>&1").c_str(),
              nullptr);
      ::_exit(127);
    }
  }
  // The exit code, or -1 after `seconds` (then the group is killed).
  int wait(double seconds) {
    const auto t0 = Clock::now();
    int status = 0;
    while (since(t0) < seconds) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    pid = -1;
    return -1;
  }
  ~Background() {  // a test that failed early leaves no job running
    int status = 0;
    if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  }
  std::string output() const { return read_text(log); }
};

inline bool wait_until(const std::function<bool()>& ready, double seconds) {
  const auto t0 = Clock::now();
  while (!ready()) {
    if (since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline int64_t last_step(const std::string& metrics) {
  std::ifstream in(metrics);
  int64_t step = -1;
  for (std::string l; std::getline(in, l);) {
    try {
      step = nlohmann::json::parse(l).at("step").get<int64_t>();
    } catch (const std::exception&) {
    }
  }
  return step;
}

// The step `latest` in a checkpoint folder names (committed), or -1.
inline int64_t committed_step(const std::string& root) {
  const std::string name = read_text(root + "/latest");
  if (name.rfind("step_", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(5));
  } catch (const std::exception&) {
    return -1;
  }
}

inline std::string kiri_cmd(const std::string& args) {
  return "ASAN_OPTIONS=detect_leaks=0 OMP_NUM_THREADS=1 " + std::string(KIRI_BINARY) + " " + args;
}

}  // namespace kiri::testing
