#pragma once
// What the tests share: fresh temporary folders, removed when the test process exits, and
// the message of the kiri::Error a call raised.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::testing {

// The folders fresh_temp_dir made in this process, removed when it exits if every test in
// it passed (a failed one's files stay for a look; KIRI_KEEP_TEST_FILES=1 keeps all). ctest
// runs each test as its own process, so without this every run left its folders in /tmp.
class TempDirs {
 public:
  static TempDirs& get() {
    static TempDirs dirs;
    return dirs;
  }
  void add(const std::string& path) { paths_.push_back(path); }
  ~TempDirs() {
    const char* keep = std::getenv("KIRI_KEEP_TEST_FILES");
    // Only the process that made them: a forked child that exits normally keeps them.
    if (::getpid() != owner_ || (keep && *keep && std::string(keep) != "0") ||
        !::testing::UnitTest::GetInstance()->Passed())
      return;
    std::error_code ec;
    for (const std::string& p : paths_) std::filesystem::remove_all(p, ec);
  }

 private:
  std::vector<std::string> paths_;
  pid_t owner_ = ::getpid();
};

// An empty folder <tmp>/<prefix>_<name>_<pid>, removed at exit (TempDirs).
inline std::string fresh_temp_dir(const std::string& prefix, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path p =
      fs::temp_directory_path() / (prefix + "_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  TempDirs::get().add(p.string());
  return p.string();
}

// An empty folder for the running test: <tmp>/kiri_<suite>_<name>_<pid>, removed at exit.
inline std::string temp_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return fresh_temp_dir(std::string("kiri_") + (info ? info->test_suite_name() : "test"), name);
}

// A fresh folder removed with its contents when this object goes out of scope (a folder that
// one test makes and drops, where temp_dir's last until the process exits).
class TempDir {
 public:
  TempDir() : TempDir("dir" + std::to_string(count()++)) {}  // dir0, dir1, ...: distinct
  explicit TempDir(const std::string& name) : path_(temp_dir(name)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  const std::string& str() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return file(name); }

 private:
  static int& count() {
    static int n = 0;
    return n;
  }
  std::string path_;
};

// The message of the kiri::Error that fn raised ("" when it raised none), its kind in *kind.
inline std::string error_of(const std::function<void()>& fn, ErrorKind* kind = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

}  // namespace kiri::testing
