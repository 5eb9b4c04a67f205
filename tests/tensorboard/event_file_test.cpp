// TensorBoard event files: TFRecord framing (masked CRC-32C of the length and of the data),
// the file's name, and its records decoded back with the protobuf classes of event.proto.
// That TensorBoard itself reads them is tests/cli/loggers_test.cpp.
#include "kiri/tensorboard/event_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiri/base/crc32c.h"
#include "kiri/tensorboard/event.pb.h"
#include "temp_dir.h"

namespace kiri::tensorboard {
namespace {

namespace fs = std::filesystem;

uint32_t le32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The records of a TFRecord file, each frame's checksums verified.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<std::string> out;
  size_t at = 0;
  while (at < s.size()) {
    EXPECT_LE(at + 12, s.size());
    const uint64_t n = le32(s, at) | (uint64_t{le32(s, at + 4)} << 32);
    EXPECT_EQ(le32(s, at + 8), masked_crc32c(s.substr(at, 8)));
    EXPECT_LE(at + 16 + n, s.size());
    out.push_back(s.substr(at + 12, n));
    EXPECT_EQ(le32(s, at + 12 + n), masked_crc32c(out.back()));
    at += 16 + n;
  }
  return out;
}

TEST(TfRecord, MaskedCrcIsTensorFlows) {
  // ((c >> 15) | (c << 17)) + 0xa282ead8 of crc32c("123456789") = 0xE3069283, worked by hand.
  EXPECT_EQ(masked_crc32c("123456789"), 0xC78AB0E5u);
}

TEST(TfRecord, FramesLengthDataAndChecksums) {
  const std::string data = "123456789";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8u + 4 + 9 + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(le32(r, 8), masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(r.substr(12, 9), data);
  EXPECT_EQ(le32(r, 21), 0xC78AB0E5u);
}

TEST(EventFile, NamedAsTensorFlowAndPyTorchName) {
  EXPECT_EQ(event_file_name(1700000000, "h1", 4242, 0), "events.out.tfevents.1700000000.h1.4242.0");
}

TEST(EventFile, WritesTheVersionThenOneEventPerStep) {
  const std::string dir = kiri::testing::temp_dir("events");
  std::string path;
  {
    EventFile f(dir + "/run");
    path = f.path();
    f.add_scalars(1, 1700000001.5, {{"loss", 5.25}, {"mem/parameters", 0.0}}, false);
    f.add_scalars(2, 1700000002.5, {{"loss", 4.0}, {"lr", 3e-4}}, true);
  }
  EXPECT_EQ(fs::path(path).parent_path(), fs::path(dir + "/run"));
  EXPECT_TRUE(fs::path(path).filename().string().starts_with("events.out.tfevents."));
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 3u);
  ::tensorflow::Event e;
  ASSERT_TRUE(e.ParseFromString(records[0]));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  ASSERT_TRUE(e.ParseFromString(records[1]));
  EXPECT_EQ(e.step(), 1);
  EXPECT_EQ(e.wall_time(), 1700000001.5);
  ASSERT_EQ(e.summary().value_size(), 2);
  EXPECT_EQ(e.summary().value(0).tag(), "loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 5.25f);
  // A zero is written (in the oneof), so a reader sees a scalar, not a value of no kind.
  EXPECT_EQ(e.summary().value(1).value_case(), ::tensorflow::Summary::Value::kSimpleValue);
  EXPECT_EQ(e.summary().value(1).simple_value(), 0.0f);
  ASSERT_TRUE(e.ParseFromString(records[2]));
  EXPECT_EQ(e.step(), 2);
  EXPECT_EQ(e.summary().value(1).simple_value(), 3e-4f);
}

TEST(EventFile, AResumeStartsASessionAtItsFirstStep) {
  const std::string dir = kiri::testing::temp_dir("session");
  std::string path;
  {
    EventFile f(dir);
    path = f.path();
    f.start_session(5);
  }
  const std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 2u);
  ::tensorflow::Event e;
  ASSERT_TRUE(e.ParseFromString(records[1]));
  EXPECT_EQ(e.step(), 5);
  EXPECT_EQ(e.session_log().status(), ::tensorflow::SessionLog::START);
}

TEST(EventFile, TwoInOneSecondDoNotCollide) {
  const std::string dir = kiri::testing::temp_dir("events2");
  EventFile a(dir), b(dir);
  EXPECT_NE(a.path(), b.path());
}

TEST(EventFile, AnUnwritableFolderIsAnIoErrorNamingIt) {
  ErrorKind kind = ErrorKind::kInternal;
  const std::string msg = kiri::testing::error_of([] { EventFile f("/dev/null/tb"); }, &kind);
  EXPECT_EQ(kind, ErrorKind::kIo);
  EXPECT_NE(msg.find("the TensorBoard event file '/dev/null/tb/events.out.tfevents."),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace kiri::tensorboard
