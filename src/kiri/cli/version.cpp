#include "kiri/cli/version.h"

// Defined for this file alone (src/kiri/CMakeLists.txt): a new version recompiles only it.
#ifndef KIRI_VERSION_STRING
#error "KIRI_VERSION_STRING is set by CMake"
#endif

namespace kiri::cli {
const char* version() {
  return KIRI_VERSION_STRING;
}
}  // namespace kiri::cli
