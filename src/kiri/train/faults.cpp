#include "kiri/train/faults.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kiri/base/error.h"
#include "kiri/base/log.h"

namespace kiri::train {

double fault_scale_for(int rank, int64_t step_index) {
  const char* spec = std::getenv("KIRI_FAULT");
  int r = -1;
  long long s = -1;
  if (spec && std::sscanf(spec, "inf:%d:%lld", &r, &s) == 2 && r == rank && s == step_index + 1)
    return HUGE_VAL;
  if (spec && std::sscanf(spec, "nan:%d:%lld", &r, &s) == 2 && r == rank && s <= step_index + 1)
    return std::nan("");
  return 1.0;
}

void inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("KIRI_FAULT");
  if (!spec || !*spec) return;
  char kind[16] = {0};
  int r = -1;
  long long s = -1;
  if (std::sscanf(spec, "%15[a-z]:%d:%lld", kind, &r, &s) != 3 || r != rank || s != step) return;
  const std::string k = kind;
  if (k != "kill" && k != "hang" && k != "raise") return;  // the others act elsewhere
  log::warn("KIRI_FAULT: injecting '", kind, "' on rank ", rank, " before step ", step + 1);
  if (k == "kill") std::raise(SIGKILL);
  if (k == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  KIRI_RAISE(kData, "KIRI_FAULT: the error injected on rank ", rank, " before step ", step + 1);
}

int slow_save_ms_for(int rank) {
  const char* spec = std::getenv("KIRI_FAULT");
  int r = -1, ms = 0;
  if (spec && std::sscanf(spec, "slowsave:%d:%d", &r, &ms) == 2 && r == rank) return ms;
  return 0;
}

}  // namespace kiri::train
