#pragma once
// Stopping on a signal, as schedulers ask for it: Slurm's preemption and `scancel` send SIGTERM
// (and SIGKILL after KillWait), `#SBATCH --signal=USR1@T` sends SIGUSR1 ahead of the end, a
// terminal sends SIGINT, and mpirun forwards SIGUSR1 to its ranks (kiri launch relays a
// SIGTERM or SIGINT to the job that way, docs/cli.md "Stopping").
//
// A StopSignals guard, while it lives, turns the first SIGTERM, SIGINT or SIGUSR1 into a
// request (stop_signal_requested) that the training loop honours at its next step boundary
// (a checkpoint, then exit); a second one stops the process at once (the signal's default
// action). Handlers may only set flags and call async-signal-safe functions, so the request
// is a flag and the note on stderr a fixed write(2).
#include <string>

namespace kiri {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (one guard at a time)
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// The signal number of the first stop request since the guard was made, 0 for none.
int stop_signal_requested();
// "SIGTERM", "SIGINT", "SIGUSR1" or "signal N".
std::string signal_name(int sig);

// A file that the handlers write "SIGTERM\n" to when a SIGTERM arrives (before anything else),
// for a supervisor that tells a rank its launcher ended from one ended from outside
// (launch/status.h). Outside a StopSignals guard, a SIGTERM then records and kills at once.
// "" clears it. Paths of 4095 bytes or more are not recorded.
void set_sigterm_record(const std::string& path);

}  // namespace kiri
