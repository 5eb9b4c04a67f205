#pragma once
// Helpers shared by the checkpoint tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/ckpt/checkpoint_dir.h"
#include "temp_dir.h"

namespace kiri::ckpt::testing {

using ::kiri::testing::TempDir;  // tests/temp_dir.h

// Names of the entries in dir, sorted.
inline std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A file with the given JSON header (padded as the format asks) and data.
inline std::string make_file(const std::string& json, const std::string& data) {
  std::string header = json;
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  char prefix[8];
  std::memcpy(prefix, &n, 8);
  return std::string(prefix, 8) + header + data;
}

// Runs fn and checks that it raises kCheckpoint with every one of `parts` in
// the message.
inline void expect_refused(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << e.what();
    for (const std::string& part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "'" << part << "' not in: " << e.message();
  }
}

// A complete checkpoint for `step` under root whose state.json says which step it is.
inline std::string save_step(const std::string& root, int64_t step, int keep_last = 0) {
  const std::string dir = begin_checkpoint(root, step);
  write_file_atomic(dir + "/model.safetensors", "weights " + std::to_string(step));
  write_file_atomic(dir + "/state.json", "{\"step\": " + std::to_string(step) + "}");
  return commit_checkpoint(root, step, keep_last);
}

}  // namespace kiri::ckpt::testing
