#pragma once
// What each rank of a supervised job (kiri launch --max-restarts, docs/cli.md "Failures and
// restarts") leaves for the supervisor in the folder that KIRI_LAUNCH_STATUS names, one small
// file per event, so that after the job the supervisor knows how each rank ended:
//
//   rank_R.start   "PID HOST": the rank started (written before anything else)
//   rank_R.error   "KIND\nEXIT\nMESSAGE": it raised the error it printed (report_error)
//   rank_R.term    "SIGTERM": the launcher ended it (mpirun does, after another rank failed)
//   rank_R.exit    "0": it finished normally
//
// A rank that started and left none of the others was ended from outside: killed (SIGKILL,
// the kernel's OOM killer) or lost with its host.
#include <optional>
#include <string>
#include <vector>

#include "kiri/base/error.h"

namespace kiri::launch {

inline constexpr const char* kLaunchStatusEnv = "KIRI_LAUNCH_STATUS";

// In a rank of a supervised job (the variable set, the rank known from the launcher's
// environment): writes rank_R.start and records a SIGTERM in rank_R.term before dying of it.
void start_launch_status();
// The error a rank reports, and a clean exit (no-ops outside a supervised job).
void record_launch_error(const std::string& kind, int code, const std::string& text);
void record_launch_exit(int code);

// How one rank ended, as its files say.
struct RankOutcome {
  int rank = 0;
  bool started = false;
  long pid = 0;
  std::string host;
  std::optional<std::string> error_kind;  // error_kind_name's words: "config error", ...
  int error_code = 0;
  std::string error_text;  // the line it printed
  bool terminated = false;
  std::optional<int> exit_code;
  // Ended from outside: started, and neither an error, a SIGTERM nor an exit recorded.
  bool vanished() const { return started && !error_kind && !terminated && !exit_code; }
};

std::vector<RankOutcome> read_launch_status(const std::string& dir, int ranks);

// Whether an error of this kind (error_kind_name's words) may go away on a restart: a
// communication timeout or abort (a rank died or hung), an I/O error (a full or failing
// disk, a lost mount) and a collective timeout's cousins are retried; config, data,
// checkpoint, out-of-memory, invalid-argument, mismatch and internal errors are not: the
// same command would fail the same way.
bool retryable_error(const std::string& kind);

}  // namespace kiri::launch
