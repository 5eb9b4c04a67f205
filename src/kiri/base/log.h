#pragma once
// Logging that names the rank. The rank is per thread, so ranks that run as
// threads of one process (the local backend) each print their own.
#include <string>

#include "kiri/base/error.h"

namespace kiri::log {

enum class Level { kDebug, kInfo, kWarning, kError };

void set_rank(int rank);  // -1: single process, no rank prefix
int rank();
Level level();  // the lowest level written
void set_level(Level level);
void write(Level level, const std::string& message);

template <typename... Args>
void info(const Args&... args) {
  write(Level::kInfo, str(args...));
}
template <typename... Args>
void warn(const Args&... args) {
  write(Level::kWarning, str(args...));
}
template <typename... Args>
void error(const Args&... args) {
  write(Level::kError, str(args...));
}
template <typename... Args>
void debug(const Args&... args) {
  write(Level::kDebug, str(args...));
}

}  // namespace kiri::log
