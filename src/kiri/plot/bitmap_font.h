#pragma once
// A small built-in 5x7 bitmap font for printable ASCII (32..126), so plots can
// carry text without a font library. Each glyph is 8 rows, top to bottom: 7
// above the baseline and one for descenders; bit 4 of a row is the leftmost
// column.
#include <cstdint>

namespace kiri::plot {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 8;                 // 7 + a descender row
inline constexpr int kGlyphAdvance = kGlyphWidth + 1;  // one column of spacing

// The rows of `c`'s glyph; characters outside 32..126 map to '?'.
const uint8_t* glyph_rows(char c);

}  // namespace kiri::plot
