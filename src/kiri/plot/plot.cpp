#include "kiri/plot/plot.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "kiri/base/atomic_file.h"
#include "kiri/base/error.h"
#include "kiri/plot/bitmap_font.h"

namespace kiri::plot {

namespace {

constexpr uint32_t kWhite = 0xFFFFFF;
constexpr uint32_t kInk = 0x202020;     // text, frame, ticks
constexpr uint32_t kGrid = 0xE4E4E4;    // light enough not to compete with curves
constexpr uint32_t kBorder = 0xB0B0B0;  // legend box
constexpr float kLineHalfWidth = 0.8f;  // curves are 1.6 px wide
constexpr float kMarkerRadius = 2.6f;
constexpr size_t kMaxMarkedPoints = 40;  // sparser series get a marker per point
constexpr int kInnerPad = 6;             // keeps data off the frame lines
constexpr int kTick = 5;
// Values beyond this are treated like inf: their differences would overflow.
constexpr double kMaxMagnitude = 1e300;

struct Rect {
  int x0, y0, x1, y1;  // [x0, x1) x [y0, y1)
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

bool usable(double x, double y) {
  return std::isfinite(x) && std::isfinite(y) && std::fabs(x) <= kMaxMagnitude &&
         std::fabs(y) <= kMaxMagnitude;
}

uint8_t channel(uint32_t rgb, int shift) {
  return static_cast<uint8_t>((rgb >> shift) & 0xFF);
}

// Alpha-blends `rgb` over the pixel; out-of-bounds pixels are ignored so
// callers may draw partly outside the image.
void blend(Image& img, int x, int y, uint32_t rgb, float alpha) {
  if (x < 0 || y < 0 || x >= img.width || y >= img.height || alpha <= 0.0f) return;
  alpha = std::min(alpha, 1.0f);
  uint8_t* p = &img.rgb[(static_cast<size_t>(y) * img.width + x) * 3];
  for (int c = 0; c < 3; ++c) {
    const float fg = channel(rgb, 16 - 8 * c);
    p[c] = static_cast<uint8_t>(std::lround(p[c] + (fg - p[c]) * alpha));
  }
}

void fill_rect(Image& img, Rect r, uint32_t rgb) {
  for (int y = r.y0; y < r.y1; ++y)
    for (int x = r.x0; x < r.x1; ++x) blend(img, x, y, rgb, 1.0f);
}

void stroke_rect(Image& img, Rect r, uint32_t rgb) {
  fill_rect(img, {r.x0, r.y0, r.x1, r.y0 + 1}, rgb);
  fill_rect(img, {r.x0, r.y1 - 1, r.x1, r.y1}, rgb);
  fill_rect(img, {r.x0, r.y0, r.x0 + 1, r.y1}, rgb);
  fill_rect(img, {r.x1 - 1, r.y0, r.x1, r.y1}, rgb);
}

// ---- text -------------------------------------------------------------------

int text_width(std::string_view text, int scale = 1) {
  if (text.empty()) return 0;
  return (static_cast<int>(text.size()) * kGlyphAdvance - 1) * scale;
}

// Horizontal text with its top-left corner at (x, y), each font pixel drawn
// as a scale x scale block.
void draw_text(Image& img, int x, int y, std::string_view text, uint32_t rgb, int scale = 1) {
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = glyph_rows(text[i]);
    const int gx0 = x + static_cast<int>(i) * kGlyphAdvance * scale;
    for (int gy = 0; gy < kGlyphHeight; ++gy)
      for (int gx = 0; gx < kGlyphWidth; ++gx)
        if (rows[gy] & (0x10 >> gx))
          fill_rect(
              img, {gx0 + gx * scale, y + gy * scale, gx0 + (gx + 1) * scale, y + (gy + 1) * scale},
              rgb);
  }
}

// Text turned 90 degrees counter-clockwise (reads bottom to top), starting at
// the bottom-left corner (x, y_bottom); used for the y-axis label.
void draw_text_up(Image& img, int x, int y_bottom, std::string_view text, uint32_t rgb) {
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t* rows = glyph_rows(text[i]);
    const int pen = static_cast<int>(i) * kGlyphAdvance;
    for (int gy = 0; gy < kGlyphHeight; ++gy)
      for (int gx = 0; gx < kGlyphWidth; ++gx)
        if (rows[gy] & (0x10 >> gx)) blend(img, x + gy, y_bottom - (pen + gx), rgb, 1.0f);
  }
}

// ---- axes -------------------------------------------------------------------

struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};

// Heckbert's "nice numbers": 1, 2, 5 or 10 times a power of ten.
double nice_number(double x, bool round) {
  const double exp = std::floor(std::log10(x));
  const double f = x / std::pow(10.0, exp);
  double nf;
  if (round)
    nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  else
    nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nf * std::pow(10.0, exp);
}

std::string format_tick(double v, double step, double magnitude) {
  char buf[64];
  if (magnitude >= 1e7 || step < 1e-5) {
    // Enough significant digits to tell neighbouring ticks apart.
    int digits = static_cast<int>(std::ceil(std::log10(magnitude / step))) + 1;
    std::snprintf(buf, sizeof buf, "%.*g", std::clamp(digits, 1, 12), v);
  } else {
    const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

// An axis covering [lo, hi] with about `target` round-valued ticks; the range
// is widened to the outer ticks. A degenerate range is padded first.
Axis nice_axis(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.05;
    lo -= pad;
    hi += pad;
  }
  Axis a;
  const double range = nice_number(hi - lo, false);
  a.step = nice_number(range / std::max(target - 1, 1), true);
  a.lo = std::floor(lo / a.step) * a.step;
  a.hi = std::ceil(hi / a.step) * a.step;
  const long n = std::lround((a.hi - a.lo) / a.step);
  const double magnitude = std::max(std::fabs(a.lo), std::fabs(a.hi));
  for (long i = 0; i <= n && i <= 1000; ++i) {
    double v = a.lo + static_cast<double>(i) * a.step;
    if (std::fabs(v) < a.step * 1e-6) v = 0;  // no "-0.00"
    a.ticks.push_back(v);
    a.labels.push_back(format_tick(v, a.step, magnitude));
  }
  return a;
}

struct Layout {
  Rect plot;  // the framed area
  Axis x, y;
  // Data to pixel coordinates (pixel centres are integers).
  float px(double v) const {
    return static_cast<float>(plot.x0 + kInnerPad +
                              (v - x.lo) / (x.hi - x.lo) * (plot.width() - 1 - 2 * kInnerPad));
  }
  float py(double v) const {
    return static_cast<float>(plot.y1 - 1 - kInnerPad -
                              (v - y.lo) / (y.hi - y.lo) * (plot.height() - 1 - 2 * kInnerPad));
  }
};

Layout make_layout(const std::vector<Series>& series, int width, int height, bool has_title) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
    }
  if (xlo > xhi) xlo = 0, xhi = 1, ylo = 0, yhi = 1;  // nothing to plot
  Layout L;
  const int top = has_title ? 12 + 2 * kGlyphHeight + 12 : 16;
  const int bottom = kTick + 4 + kGlyphHeight + 10 + kGlyphHeight + 10;
  // The y ticks depend on the plot height, the left margin on their labels.
  L.y = nice_axis(ylo, yhi, std::max(2, (height - top - bottom) / 45));
  int label_w = 0;
  for (const std::string& s : L.y.labels) label_w = std::max(label_w, text_width(s));
  const int left = 10 + kGlyphHeight + 10 + label_w + 4 + kTick;
  L.plot = {left, top, width - 20, height - bottom};
  L.x = nice_axis(xlo, xhi, std::max(2, L.plot.width() / 90));
  return L;
}

void draw_grid(Image& img, const Layout& L) {
  const Rect& p = L.plot;
  for (double t : L.x.ticks) {
    const int x = static_cast<int>(std::lround(L.px(t)));
    fill_rect(img, {x, p.y0, x + 1, p.y1}, kGrid);
  }
  for (double t : L.y.ticks) {
    const int y = static_cast<int>(std::lround(L.py(t)));
    fill_rect(img, {p.x0, y, p.x1, y + 1}, kGrid);
  }
}

void draw_axes(Image& img, const Layout& L, const std::string& x_label,
               const std::string& y_label) {
  const Rect& p = L.plot;
  stroke_rect(img, p, kInk);
  for (size_t i = 0; i < L.x.ticks.size(); ++i) {
    const int x = static_cast<int>(std::lround(L.px(L.x.ticks[i])));
    fill_rect(img, {x, p.y1, x + 1, p.y1 + kTick}, kInk);
    const std::string& s = L.x.labels[i];
    draw_text(img, x - text_width(s) / 2, p.y1 + kTick + 4, s, kInk);
  }
  for (size_t i = 0; i < L.y.ticks.size(); ++i) {
    const int y = static_cast<int>(std::lround(L.py(L.y.ticks[i])));
    fill_rect(img, {p.x0 - kTick, y, p.x0, y + 1}, kInk);
    const std::string& s = L.y.labels[i];
    draw_text(img, p.x0 - kTick - 4 - text_width(s), y - kGlyphHeight / 2, s, kInk);
  }
  const int x_label_top = p.y1 + kTick + 4 + kGlyphHeight + 10;
  draw_text(img, p.x0 + (p.width() - text_width(x_label)) / 2, x_label_top, x_label, kInk);
  const int y_mid = p.y0 + p.height() / 2;
  draw_text_up(img, 10, y_mid + text_width(y_label) / 2, y_label, kInk);
}

// ---- curves -----------------------------------------------------------------

// Per-pixel coverage of one series inside the plot. Taking the maximum (not
// the sum) keeps the joints of a polyline from darkening where segments meet.
struct Coverage {
  Rect clip;
  std::vector<float> a;
  explicit Coverage(Rect r) : clip(r), a(static_cast<size_t>(r.width()) * r.height(), 0.0f) {}
  void add(int x, int y, float c) {
    if (x < clip.x0 || y < clip.y0 || x >= clip.x1 || y >= clip.y1 || c <= 0.0f) return;
    float& slot = a[static_cast<size_t>(y - clip.y0) * clip.width() + (x - clip.x0)];
    slot = std::max(slot, std::min(c, 1.0f));
  }
};

float distance_to_segment(float px, float py, float x0, float y0, float x1, float y1) {
  const float dx = x1 - x0, dy = y1 - y0;
  const float len2 = dx * dx + dy * dy;
  float t = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0.0f;
  t = std::clamp(t, 0.0f, 1.0f);
  return std::hypot(px - (x0 + t * dx), py - (y0 + t * dy));
}

// Anti-aliased thick segment: walks the major axis and only tests the few
// pixels across the line at each step, so long segments stay cheap.
void cover_segment(Coverage& cov, float x0, float y0, float x1, float y1) {
  const bool steep = std::fabs(y1 - y0) > std::fabs(x1 - x0);
  const float a0 = steep ? y0 : x0, a1 = steep ? y1 : x1;
  const float b0 = steep ? x0 : y0, b1 = steep ? x1 : y1;
  const int reach = static_cast<int>(std::ceil(kLineHalfWidth + 1.5f));
  const int lo = static_cast<int>(std::floor(std::min(a0, a1))) - reach;
  const int hi = static_cast<int>(std::ceil(std::max(a0, a1))) + reach;
  for (int a = lo; a <= hi; ++a) {
    float t = a1 != a0 ? (a - a0) / (a1 - a0) : 0.0f;
    t = std::clamp(t, 0.0f, 1.0f);
    const int bc = static_cast<int>(std::lround(b0 + t * (b1 - b0)));
    for (int b = bc - reach; b <= bc + reach; ++b) {
      const int x = steep ? b : a, y = steep ? a : b;
      const float d =
          distance_to_segment(static_cast<float>(x), static_cast<float>(y), x0, y0, x1, y1);
      cov.add(x, y, kLineHalfWidth + 0.5f - d);
    }
  }
}

void cover_disc(Coverage& cov, float cx, float cy, float r) {
  const int reach = static_cast<int>(std::ceil(r + 1));
  const int ix = static_cast<int>(std::lround(cx)), iy = static_cast<int>(std::lround(cy));
  for (int y = iy - reach; y <= iy + reach; ++y)
    for (int x = ix - reach; x <= ix + reach; ++x)
      cov.add(x, y, r + 0.5f - std::hypot(x - cx, y - cy));
}

void draw_series(Image& img, const Layout& L, const Series& s) {
  const Rect& p = L.plot;
  Coverage cov({p.x0 + 1, p.y0 + 1, p.x1 - 1, p.y1 - 1});  // inside the frame
  std::vector<std::pair<float, float>> pts;
  for (size_t i = 0; i < s.x.size(); ++i)
    if (usable(s.x[i], s.y[i])) pts.emplace_back(L.px(s.x[i]), L.py(s.y[i]));
  for (size_t i = 1; i < pts.size(); ++i)
    cover_segment(cov, pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second);
  if (pts.size() <= kMaxMarkedPoints)
    for (const auto& [x, y] : pts) cover_disc(cov, x, y, kMarkerRadius);
  for (int y = cov.clip.y0; y < cov.clip.y1; ++y)
    for (int x = cov.clip.x0; x < cov.clip.x1; ++x)
      blend(img, x, y, s.rgb,
            cov.a[static_cast<size_t>(y - cov.clip.y0) * cov.clip.width() + (x - cov.clip.x0)]);
}

void draw_legend(Image& img, const Layout& L, const std::vector<Series>& series) {
  std::vector<const Series*> shown;
  int label_w = 0;
  for (const Series& s : series)
    if (!s.label.empty()) {
      shown.push_back(&s);
      label_w = std::max(label_w, text_width(s.label));
    }
  if (shown.empty()) return;
  constexpr int kRow = kGlyphHeight + 6, kSample = 20;
  const int w = 8 + kSample + 6 + label_w + 8;
  const int h = 6 + static_cast<int>(shown.size()) * kRow + 2;
  const Rect box{L.plot.x1 - 10 - w, L.plot.y0 + 10, L.plot.x1 - 10, L.plot.y0 + 10 + h};
  fill_rect(img, box, kWhite);
  stroke_rect(img, box, kBorder);
  for (size_t i = 0; i < shown.size(); ++i) {
    const int top = box.y0 + 6 + static_cast<int>(i) * kRow;
    const int mid = top + kGlyphHeight / 2;
    fill_rect(img, {box.x0 + 8, mid - 1, box.x0 + 8 + kSample, mid + 1}, shown[i]->rgb);
    draw_text(img, box.x0 + 8 + kSample + 6, top, shown[i]->label, kInk);
  }
}

// ---- PNG --------------------------------------------------------------------

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

// A chunk is length, type, data, and a CRC-32 over type and data.
void put_chunk(std::string& out, const char type[5], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t crc_from = out.size();
  out.append(type, 4);
  out += data;
  const auto* bytes = reinterpret_cast<const Bytef*>(out.data() + crc_from);
  put_u32(out, static_cast<uint32_t>(::crc32(0L, bytes, static_cast<uInt>(4 + data.size()))));
}

}  // namespace

uint32_t Image::pixel(int x, int y) const {
  KIRI_CHECK(x >= 0 && y >= 0 && x < width && y < height, "pixel (", x, ", ", y, ") outside a ",
             width, "x", height, " image");
  const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

Image render_line_plot(const std::vector<Series>& series, const std::string& title,
                       const std::string& x_label, const std::string& y_label, int width,
                       int height) {
  KIRI_CHECK(width >= 160 && width <= 8192 && height >= 120 && height <= 8192, "plot size ", width,
             "x", height, " outside [160, 8192] x [120, 8192]");
  for (const Series& s : series)
    KIRI_CHECK(s.x.size() == s.y.size(), "series '", s.label, "' has ", s.x.size(),
               " x values but ", s.y.size(), " y values");
  Image img;
  img.width = width;
  img.height = height;
  img.rgb.assign(static_cast<size_t>(width) * height * 3, 0xFF);
  const Layout L = make_layout(series, width, height, !title.empty());
  draw_grid(img, L);
  bool any_point = false;
  for (const Series& s : series) {
    draw_series(img, L, s);
    for (size_t i = 0; i < s.x.size() && !any_point; ++i) any_point = usable(s.x[i], s.y[i]);
  }
  draw_axes(img, L, x_label, y_label);
  if (!any_point) {
    const std::string msg = "no data";
    draw_text(img, L.plot.x0 + (L.plot.width() - text_width(msg)) / 2,
              L.plot.y0 + L.plot.height() / 2 - kGlyphHeight / 2, msg, kInk);
  }
  draw_legend(img, L, series);
  draw_text(img, (width - text_width(title, 2)) / 2, 12, title, kInk, 2);
  return img;
}

std::string encode_png(const Image& image) {
  KIRI_CHECK(image.width > 0 && image.height > 0 &&
                 image.rgb.size() == static_cast<size_t>(image.width) * image.height * 3,
             "image ", image.width, "x", image.height, " with ", image.rgb.size(), " bytes");
  // Scanlines, each behind a filter-type byte 0 (None).
  const size_t row = static_cast<size_t>(image.width) * 3;
  std::string raw;
  raw.reserve((row + 1) * image.height);
  for (int y = 0; y < image.height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(&image.rgb[y * row]), row);
  }
  uLongf packed_size = ::compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  const int rc = ::compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                             reinterpret_cast<const Bytef*>(raw.data()),
                             static_cast<uLong>(raw.size()), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) KIRI_RAISE(kInternal, "zlib compress2 failed with code ", rc);
  packed.resize(packed_size);

  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(image.width));
  put_u32(ihdr, static_cast<uint32_t>(image.height));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, deflate, filter 0, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", "");
  return png;
}

void write_line_plot_png(const std::string& path, const std::vector<Series>& series,
                         const std::string& title, const std::string& x_label,
                         const std::string& y_label, int width, int height) {
  const std::string png =
      encode_png(render_line_plot(series, title, x_label, y_label, width, height));
  write_file_atomic(path, png);
}

}  // namespace kiri::plot
