#include "kiri/train/faults.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "kiri/base/error.h"
#include "kiri/base/log.h"
#include "kiri/base/stop_signal.h"

namespace kiri::train {

namespace {

// KIRI_FAULT=KIND:RANK:N, read in this one place; nullopt when unset or malformed.
struct Fault {
  std::string kind;
  int rank = -1;
  long long n = -1;  // a step (1-based) or, for slowsave, milliseconds
};

std::optional<Fault> fault_from_env() {
  const char* spec = std::getenv("KIRI_FAULT");
  if (!spec || !*spec) return std::nullopt;
  char kind[16] = {0};
  Fault f;
  if (std::sscanf(spec, "%15[a-z]:%d:%lld", kind, &f.rank, &f.n) != 3) return std::nullopt;
  f.kind = kind;
  return f;
}

// stopwait: the step boundary a test's signal lands at, whatever the load; a tiny step takes
// a millisecond, so a signal sent on seeing step S in metrics.jsonl could otherwise land after
// the run's last step. Bounded, so that a test that never signals fails with a named error.
void wait_for_stop_signal(int rank, int64_t step) {
  log::warn("KIRI_FAULT: rank ", rank, " waits for a stop signal before step ", step + 1);
  const auto t0 = std::chrono::steady_clock::now();
  while (!stop_signal_requested()) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120))
      KIRI_RAISE(kData, "KIRI_FAULT: no stop signal reached rank ", rank, " in 120 s before step ",
                 step + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

double fault_scale_for(int rank, int64_t step_index) {
  const std::optional<Fault> f = fault_from_env();
  if (f && f->kind == "inf" && f->rank == rank && f->n == step_index + 1) return HUGE_VAL;
  if (f && f->kind == "nan" && f->rank == rank && f->n <= step_index + 1) return std::nan("");
  return 1.0;
}

void inject_fault(int rank, int64_t step) {
  const std::optional<Fault> f = fault_from_env();
  if (!f || f->rank != rank || f->n != step) return;
  const std::string& k = f->kind;
  if (k == "stopwait") return wait_for_stop_signal(rank, step);
  if (k != "kill" && k != "hang" && k != "raise") return;  // the others act elsewhere
  log::warn("KIRI_FAULT: injecting '", k, "' on rank ", rank, " before step ", step + 1);
  if (k == "kill") std::raise(SIGKILL);
  if (k == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  KIRI_RAISE(kData, "KIRI_FAULT: the error injected on rank ", rank, " before step ", step + 1);
}

int slow_save_ms_for(int rank) {
  const std::optional<Fault> f = fault_from_env();
  if (f && f->kind == "slowsave" && f->rank == rank) return static_cast<int>(f->n);
  return 0;
}

}  // namespace kiri::train
