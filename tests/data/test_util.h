#pragma once
// Helpers shared by the data tests.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>

#include "kiri/base/error.h"
#include "kiri/data/gpt2_tokenizer.h"

namespace kiri::data::testing {

// A fresh, empty folder for one test, removed when it goes out of scope.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("kiri_data_") + info->test_suite_name() + "_" + info->name() + "_" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

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
  static const Gpt2Tokenizer tokenizer(KIRI_TEST_DATA_DIR "/gpt2/encoder.json",
                                       KIRI_TEST_DATA_DIR "/gpt2/vocab.bpe");
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
