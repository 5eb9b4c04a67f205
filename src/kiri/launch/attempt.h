#pragma once
// One attempt of a supervised job (launch/supervisor.h): the launcher runs as a child whose
// stderr passes through this process, which meanwhile watches the ranks on this host (the
// pids their rank_R.start files give) for a stopped one, and after the launcher exits waits
// until every one of them is gone.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kiri::launch {

struct AttemptResult {
  int exit_code = 0;  // the launcher's; 128 + N when a signal N ended it
  double seconds = 0;
  std::set<int> stopped;  // ranks seen stopped (state T: SIGSTOP, a debugger) on this host
  // mpirun's "process rank R with PID P on node H exited on signal S": {R, S}.
  std::optional<std::pair<int, int>> noticed;
  double wait_gone_s = 0;    // from the launcher's exit until its ranks here were gone
  int killed_leftovers = 0;  // ranks still alive after the wait, ended with SIGKILL
  bool interrupted = false;  // this process was asked to stop (SIGTERM, SIGINT)
  // The launcher outlived a rank's error by a grace period and was ended from here.
  bool launcher_ended = false;
  bool ranks_finished = false;  // ... when every rank had finished: the job succeeded
};

// Runs `command` (the launcher's argv) with `env` added to its environment; `status_dir`
// holds the ranks' records (launch/status.h) of `ranks` ranks. The launcher's stderr is
// passed through line by line, less mpirun's own banners about ranks that ended (the
// supervisor names the failure itself), unless `verbose`.
AttemptResult run_attempt(const std::vector<std::string>& command,
                          const std::map<std::string, std::string>& env,
                          const std::string& status_dir, int ranks, bool verbose = false);

// mpirun's noise about a job that ended badly, which the supervisor's own lines replace: its
// ORTE_ERROR_LOG lines and its banners (a block between two lines of dashes) that open with
// "MPI_ABORT was invoked", "Primary job  terminated normally", "mpirun detected that one or
// more processes exited", "mpirun has exited due to process rank" or "mpirun noticed that".
// Fed the stderr lines in order; holds a line of dashes until the next line says which.
class LauncherNoise {
 public:
  // The lines to print now for `line` (none, it, or a held line of dashes and it).
  std::vector<std::string> feed(const std::string& line);
  std::vector<std::string> flush();  // at the end: a held line

 private:
  bool in_banner_ = false;
  std::optional<std::string> held_;  // a line of dashes that may open a banner
};

// Whether a SIGTERM or SIGINT asked the supervisor to stop (no restart follows).
bool stop_requested();

}  // namespace kiri::launch
