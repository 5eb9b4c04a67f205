#pragma once
// The test venv of scripts/test-venv.sh (torch, transformers, tensorboard from PyPI, made once
// under the user's cache), for the tests that check kiri against those packages.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/run_kiri.h"
#include "test_paths.h"

namespace kiri::testing {

// The test venv's python (with `option` "--transformers4": a command prefix whose python has
// transformers 4.46); "" with the reason in *why when scripts/test-venv.sh cannot make it.
inline std::string venv_python(std::string* why, const std::string& option = "") {
  const std::string err = std::filesystem::temp_directory_path() /
                          ("kiri_test_venv_" + std::to_string(getpid()) + ".err");
  const Result r = run_shell("{ bash " + std::string(KIRI_SOURCE_DIR) + "/scripts/test-venv.sh " +
                             option + " 2>" + err + "; }");
  std::ifstream f(err);
  std::stringstream s;
  s << f.rdbuf();
  std::filesystem::remove(err);
  if (r.code == 0 && !r.output.empty()) return r.output.substr(0, r.output.find('\n'));
  *why = "scripts/test-venv.sh " + option + " exited " + std::to_string(r.code) + ": " + s.str();
  return "";
}

}  // namespace kiri::testing
