#pragma once
// Helpers shared by the data tests.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiri/base/error.h"
#include "kiri/data/gpt2_tokenizer.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace kiri::data::testing {

using ::kiri::testing::TempDir;  // tests/temp_dir.h

inline void write_text(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Loaded once: parsing encoder.json and vocab.bpe takes a noticeable moment.
inline const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer tokenizer(std::string(KIRI_TEST_DATA_DIR) + "/gpt2/encoder.json",
                                       std::string(KIRI_TEST_DATA_DIR) + "/gpt2/vocab.bpe");
  return tokenizer;
}

// Runs fn, expects a kiri::Error of this kind whose message contains every needle.
template <typename Fn>
void expect_error(Fn&& fn, ErrorKind kind, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a " << error_kind_name(kind) << " error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& needle : needles)
      EXPECT_NE(e.message().find(needle), std::string::npos)
          << "message '" << e.message() << "' lacks '" << needle << "'";
  }
}

}  // namespace kiri::data::testing
