#pragma once
// What each rank of a supervised job (kiri launch --max-restarts, docs/cli.md "Failures and
// restarts") leaves for the supervisor in the folder that KIRI_LAUNCH_STATUS names, one small
// file per event, so that after the job the supervisor knows how each rank ended:
//
//   rank_R.start   "PID HOST": the rank started (written before anything else)
//   rank_R.error   "KIND\nEXIT\nMESSAGE": it raised the error it printed (report_error)
//   rank_R.term    "SIGTERM": the launcher ended it (mpirun does, after another rank failed)
//   rank_R.exit    "0": it finished normally
//   rank_R.unreachable  "REACHED\nRANK RANK ...": a timeout's ranks that did not answer, and
//                  whether this rank could still reach the launcher (1, 0; "-": unknown)
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
// environment): writes rank_R.start and records a SIGTERM in rank_R.term when one comes
// (base/stop_signal.h).
void start_launch_status();
// The error a rank reports, and a clean exit (no-ops outside a supervised job).
void record_launch_error(const std::string& kind, int code, const std::string& text);
void record_launch_exit(int code);
// A communication timeout's ranks that did not answer (world ranks), and whether this rank
// still reached the launcher (reaches_launcher), for the supervisor to tell the host that
// lost its link from the hosts that lost sight of it.
void record_launch_unreachable(const std::vector<int>& ranks, std::optional<bool> reached);

// Whether this rank reaches the launcher's host: a TCP connect to the address mpirun gave
// its ranks (OMPI_MCA_orte_hnp_uri) within `timeout_s`. nullopt without one (not mpirun).
// A rank cut off from the others and from the launcher is on the host that lost its link.
std::optional<bool> reaches_launcher(double timeout_s);

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
  std::vector<int> unreachable;          // ranks it could not reach (rank_R.unreachable)
  std::optional<bool> reached_launcher;  // and whether it reached the launcher
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
