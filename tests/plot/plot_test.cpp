#include "kiri/plot/plot.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::plot {
namespace {

uint32_t be32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// A decoded PNG as written by encode_png: the IHDR size and the inflated
// IDAT stream, with every chunk's CRC checked on the way.
struct DecodedPng {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> raw;  // height rows of (filter byte, 3 * width bytes)
  // 0xRRGGBB of a pixel; valid because every row uses filter 0.
  uint32_t pixel(uint32_t x, uint32_t y) const {
    const uint8_t* p = &raw[y * (1 + 3 * width) + 1 + 3 * x];
    return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  }
};

DecodedPng decode(const std::string& png) {
  DecodedPng out;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  std::vector<std::string> types;
  for (size_t at = 8; at + 12 <= png.size();) {
    const uint32_t len = be32(png, at);
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, len);
    const auto crc = ::crc32(0L, reinterpret_cast<const Bytef*>(png.data() + at + 4), 4 + len);
    EXPECT_EQ(be32(png, at + 8 + len), static_cast<uint32_t>(crc)) << type;
    types.push_back(type);
    if (type == "IHDR") {
      out.width = be32(data, 0);
      out.height = be32(data, 4);
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));
    } else if (type == "IDAT") {
      idat += data;
    }
    at += 12 + len;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  uLongf size = static_cast<uLongf>(out.height) * (1 + 3 * out.width);
  out.raw.resize(size);
  EXPECT_EQ(::uncompress(out.raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()),
                         static_cast<uLong>(idat.size())),
            Z_OK);
  EXPECT_EQ(size, static_cast<uLongf>(out.height) * (1 + 3 * out.width));
  for (uint32_t y = 0; y < out.height; ++y) EXPECT_EQ(out.raw[y * (1 + 3 * out.width)], 0);
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class PlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("kiri_plot_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

// Pure red is used only for the series under test: axes, text and grid are grey.
bool is_red(uint32_t rgb) {
  const int r = rgb >> 16, g = (rgb >> 8) & 0xFF, b = rgb & 0xFF;
  return r > 200 && g < 120 && b < 120;
}

TEST_F(PlotTest, WritesValidPngWithTheLine) {
  Series s{"train", {}, {}, 0xFF0000};
  for (int i = 0; i <= 200; ++i) {
    s.x.push_back(i);
    s.y.push_back(10.0 * std::exp(-i / 50.0) + 2.0);
  }
  const std::string file = path("loss.png");
  write_line_plot_png(file, {s}, "Loss", "step", "loss", 640, 400);
  const DecodedPng png = decode(read_all(file));
  ASSERT_EQ(png.width, 640u);
  ASSERT_EQ(png.height, 400u);
  // The curve runs across most of the plot: red pixels in many columns.
  std::set<uint32_t> red_columns;
  for (uint32_t y = 0; y < png.height; ++y)
    for (uint32_t x = 0; x < png.width; ++x)
      if (is_red(png.pixel(x, y))) red_columns.insert(x);
  EXPECT_GT(red_columns.size(), png.width / 2);
  // Nothing but the final file is left in the directory.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(PlotTest, ConstantYIsAHorizontalLine) {
  // No label: no legend sample, so every red pixel belongs to the curve.
  Series s{"", {0, 1, 2, 3, 100}, {3.5, 3.5, 3.5, 3.5, 3.5}, 0xFF0000};
  const Image img = render_line_plot({s}, "flat", "x", "y", 400, 300);
  int min_y = img.height, max_y = -1, red = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      if (is_red(img.pixel(x, y))) {
        min_y = std::min(min_y, y);
        max_y = std::max(max_y, y);
        ++red;
      }
  EXPECT_GT(red, 200);
  EXPECT_LE(max_y - min_y, 6);  // the line plus the point markers
}

TEST_F(PlotTest, SinglePointIsVisible) {
  Series s{"val", {42}, {1.25}, 0xFF0000};
  const Image img = render_line_plot({s}, "one", "step", "loss");
  int red = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) red += is_red(img.pixel(x, y));
  EXPECT_GT(red, 10);  // marker and legend sample
}

TEST_F(PlotTest, SkipsNonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Series s{"train", {0, 1, 2, 3, nan, 5}, {4.0, nan, inf, -inf, 1.0, 2.0}, 0xFF0000};
  const std::string file = path("nan.png");
  write_line_plot_png(file, {s}, "NaN", "step", "loss", 320, 200);
  const DecodedPng png = decode(read_all(file));
  EXPECT_EQ(png.width, 320u);
  EXPECT_EQ(png.height, 200u);
}

TEST_F(PlotTest, EmptyInputGivesAPlainPlot) {
  for (const auto& series :
       {std::vector<Series>{}, std::vector<Series>{Series{"empty", {}, {}, 0}}}) {
    const std::string file = path("empty.png");
    write_line_plot_png(file, series, "", "", "");
    const DecodedPng png = decode(read_all(file));
    EXPECT_EQ(png.width, 800u);
    EXPECT_EQ(png.height, 500u);
    bool non_white = false;
    for (uint32_t i = 0; i < png.width * png.height && !non_white; ++i)
      non_white = png.pixel(i % png.width, i / png.width) != 0xFFFFFF;
    EXPECT_TRUE(non_white);  // the frame is drawn
  }
}

TEST_F(PlotTest, RejectsBadArguments) {
  Series s{"bad", {1, 2}, {1}, 0};
  EXPECT_THROW(render_line_plot({s}, "", "", ""), Error);
  EXPECT_THROW(render_line_plot({}, "", "", "", 10, 10), Error);
}

TEST_F(PlotTest, UnwritablePathIsAnIoError) {
  try {
    write_line_plot_png(path("missing/dir/loss.png"), {}, "", "", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
  }
}

}  // namespace
}  // namespace kiri::plot
