#include "kiri/base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace kiri::log {
namespace {
thread_local int t_rank = -1;
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mutex;
const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "";
}
}  // namespace

void set_rank(int rank) {
  t_rank = rank;
}
int rank() {
  return t_rank;
}
Level level() {
  return g_level.load();
}

void set_level(Level level) {
  g_level = level;
}

void write(Level level, const std::string& message) {
  if (level < g_level.load()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (t_rank >= 0)
    std::fprintf(stderr, "[kiri rank %d] %s: %s\n", t_rank, level_name(level), message.c_str());
  else
    std::fprintf(stderr, "[kiri] %s: %s\n", level_name(level), message.c_str());
  std::fflush(stderr);
}

}  // namespace kiri::log
