#include "kiri/cli/report.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "kiri/comm/agree.h"
#include "kiri/comm/hang_error.h"
#include "kiri/launch/status.h"
#include "kiri/launch/world.h"

namespace kiri::cli {

namespace {
std::atomic<bool> g_verbose{false};

void print(const std::string& text) {
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
}

std::string rank_prefix(int rank) {
  return rank >= 0 ? str("rank ", rank, ": ") : std::string();
}

// How long a rank that leaves its error to the printing rank waits for that rank to end the
// job before it prints the error itself and ends the job (the printing rank may be healthy,
// the error this rank's alone).
constexpr std::chrono::seconds kPrinterGrace{10};
// How long a rank that timed out tries to reach the launcher's host.
constexpr double kLauncherProbeS = 2;

// Prints `text` if this rank is the printer, then ends an MPI job so that no rank waits for
// this one: the printer aborts it (after the line is flushed), the others wait to be ended.
void print_and_end_job(const std::string& text, bool printer, int code) {
  if (printer) print(text);
  if (!printer && comm::mpi_job_running()) {
    std::this_thread::sleep_for(kPrinterGrace);
    print(text);
  }
  std::fflush(stdout);  // the progress lines before the abort, which flushes nothing
  comm::end_mpi_job_after_error(code);
}
}  // namespace

void set_verbose(bool verbose) {
  g_verbose = verbose;
}

bool verbose() {
  return g_verbose;
}

bool same_on_every_rank(ErrorKind kind) {
  return kind == ErrorKind::kConfig;
}

std::string error_text(const Error& e, int rank, bool verbose) {
  std::string text = str("kiri: ", rank_prefix(rank), error_kind_name(e.kind()), ": ", e.message());
  if (verbose) text += " [" + e.where() + "]";
  return text;
}

int report_error(const Error& e) {
  const int code = e.kind() == ErrorKind::kConfig ? 2 : 1;
  const int rank = launch::job_rank();
  const auto* agreed = dynamic_cast<const comm::AgreedError*>(&e);
  // An agreed error: every rank holds it, rank 0 prints it, naming the rank that failed. A
  // config error is every rank's: rank 0 prints it. Any other: the rank that raised it.
  const int named = same_on_every_rank(e.kind()) ? -1 : agreed ? agreed->failed_rank() : rank;
  const bool printer = (agreed || same_on_every_rank(e.kind())) ? rank <= 0 : true;
  // Under kiri launch's supervisor: how this rank ended, for its decision to restart.
  launch::record_launch_error(error_kind_name(e.kind()), code, error_text(e, named, false));
  std::string text = error_text(e, named, verbose());
  if (const auto* hang = dynamic_cast<const comm::HangError*>(&e);
      hang && !hang->missing_world_ranks().empty()) {
    // Ranks that do not answer: is it their host that is cut off, or this one?
    const std::optional<bool> reached = launch::reaches_launcher(kLauncherProbeS);
    launch::record_launch_unreachable(hang->missing_world_ranks(), reached);
    if (reached == false)
      text +=
          "\nThis rank cannot reach the launcher's host either: the lost link is likely its "
          "own host's.";
  }
  print_and_end_job(text, printer, code);
  return code;
}

int report_unexpected(const std::exception& e) {
  launch::record_launch_error(
      "unexpected error", 1,
      str("kiri: ", rank_prefix(launch::job_rank()), "unexpected error: ", e.what()));
  print_and_end_job(str("kiri: ", rank_prefix(launch::job_rank()), "unexpected error: ", e.what()),
                    true, 1);
  return 1;
}

}  // namespace kiri::cli
