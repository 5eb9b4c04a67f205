#pragma once
// Loss-curve plots as PNG files, with no plotting or image library: a small
// RGB rasterizer (anti-aliased polylines, a built-in 5x7 bitmap font) and a
// PNG encoder on top of zlib. The training loop writes one at the end of a run.
#include <cstdint>
#include <string>
#include <vector>

namespace kiri::plot {

// One curve. x and y have the same length; points where either is NaN or
// infinite are skipped (the line joins the finite neighbours). A series with
// at most a few dozen points also gets a marker per point, so sparse curves
// (validation loss) and single points stay visible. Series with an empty
// label are left out of the legend.
struct Series {
  std::string label;
  std::vector<double> x, y;
  uint32_t rgb = 0x1F77B4;  // 0xRRGGBB
};

// An 8-bit RGB raster, rows top to bottom, 3 bytes per pixel.
struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
  uint32_t pixel(int x, int y) const;  // 0xRRGGBB
};

// Draws the plot: white background, frame with tick marks and round-number
// tick labels, light grid, title, axis labels (the y label reads upwards),
// legend in the top-right corner. Empty input, a single point and a constant
// y give a valid plot. Throws kInvalidArgument for mismatched x/y lengths or
// a size outside [160, 8192] x [120, 8192].
Image render_line_plot(const std::vector<Series>& series, const std::string& title,
                       const std::string& x_label, const std::string& y_label, int width = 800,
                       int height = 500);

// The image as a PNG file's bytes (8-bit RGB, filter 0, one IDAT chunk).
std::string encode_png(const Image& image);

// render_line_plot + encode_png, written atomically: a reader sees the old
// file or the complete new one. Throws kIo when the file cannot be written.
void write_line_plot_png(const std::string& path, const std::vector<Series>& series,
                         const std::string& title, const std::string& x_label,
                         const std::string& y_label, int width = 800, int height = 500);

}  // namespace kiri::plot
