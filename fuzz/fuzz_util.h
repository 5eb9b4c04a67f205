#pragma once
// Shared by the fuzz targets: every kiri::Error is a normal outcome (the reader refused the
// input by name), so only crashes, hangs, leaks and sanitizer reports count as findings.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiri/base/error.h"

namespace kiri::fuzz {

// Runs `body`, returning normally on a kiri::Error whose message is not empty (an error
// without a message would name nothing, so it aborts as a finding).
template <typename Body>
void refuse_by_name(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.message().empty()) __builtin_trap();
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace kiri::fuzz
