#pragma once
// Running the kiri binary from a test: the command tests (cli/, plan/) share it.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "temp_dir.h"
#include "test_paths.h"

namespace kiri::testing {

struct Result {
  int code = -1;       // the exit status; 128 when it did not exit
  std::string output;  // stdout and stderr
};

// A shell command's exit status and its stdout and stderr together.
inline Result run_shell(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

// `env OMP_NUM_THREADS=1 KIRI_BINARY args`, stdout and stderr together. Under `kiri launch`
// the ASan build's leak check is off: Open MPI leaves its own allocations at exit, which
// LeakSanitizer reports as leaks and turns into a failed exit code (kiri's own code is
// leak-checked by the in-process tests).
inline Result run_kiri(const std::string& args, const std::string& env = "") {
  const bool launched = args.find("launch ") != std::string::npos;
  const std::string no_mpi_leaks = launched && env.find("ASAN_OPTIONS") == std::string::npos
                                       ? " ASAN_OPTIONS=detect_leaks=0"
                                       : "";
  return run_shell(env + no_mpi_leaks + " OMP_NUM_THREADS=1 " + KIRI_BINARY + " " + args);
}

}  // namespace kiri::testing
