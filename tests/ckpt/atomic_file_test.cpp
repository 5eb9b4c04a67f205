#include "kiri/base/atomic_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "ckpt/test_util.h"
#include "kiri/base/error.h"

namespace kiri::ckpt {
namespace {

using testing::list_dir;
using testing::TempDir;

TEST(AtomicFile, WritesAndReplacesLeavingNoTempFiles) {
  TempDir dir;
  const std::string path = dir / "a.txt";
  write_file_atomic(path, "first");
  EXPECT_EQ(read_file(path), "first");
  write_file_atomic(path, "second, longer");
  EXPECT_EQ(read_file(path), "second, longer");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, WriterCallbackStreamsPieces) {
  TempDir dir;
  const std::string path = dir / "b.bin";
  write_file_atomic(path, [](FileWriter& w) {
    w.write("abc");
    const char bytes[] = {'\0', '\1', '\2'};
    w.write(bytes, sizeof bytes);
    EXPECT_EQ(w.written(), 6u);
  });
  EXPECT_EQ(read_file(path), std::string("abc\0\1\2", 6));
}

TEST(AtomicFile, ThrowingCallbackKeepsOldFileAndRemovesTemp) {
  TempDir dir;
  const std::string path = dir / "c.txt";
  write_file_atomic(path, "old");
  EXPECT_THROW(write_file_atomic(path,
                                 [](FileWriter& w) {
                                   w.write("partial");
                                   throw std::runtime_error("writer failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_file(path), "old");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"c.txt"});
}

TEST(AtomicFile, MissingDirectoryIsIoErrorNamingPath) {
  TempDir dir;
  const std::string path = dir / "no/such/dir/file";
  try {
    write_file_atomic(path, "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("No such file or directory"), std::string::npos) << e.message();
  }
}

TEST(AtomicFile, RenameOntoDirectoryFailsCleanly) {
  TempDir dir;
  std::filesystem::create_directory(dir / "target");
  try {
    write_file_atomic(dir / "target", "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("target"), std::string::npos) << e.message();
  }
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"target"});
}

TEST(AtomicFile, PermissionDeniedIsIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  std::filesystem::permissions(
      dir / "ro", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  try {
    write_file_atomic(dir / "ro/f", "x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("Permission denied"), std::string::npos) << e.message();
  }
  std::filesystem::permissions(dir / "ro", std::filesystem::perms::owner_all);
}

TEST(AtomicFile, ReadOfMissingFileIsIoError) {
  TempDir dir;
  try {
    read_file(dir / "missing");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("missing"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiri::ckpt
