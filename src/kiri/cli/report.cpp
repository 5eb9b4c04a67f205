#include "kiri/cli/report.h"

#include <atomic>
#include <cstdio>

#include "kiri/cli/world.h"

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
  const int rank = job_rank();
  if (same_on_every_rank(e.kind())) {
    if (rank <= 0) print(error_text(e, -1, verbose()));
  } else {
    print(error_text(e, rank, verbose()));
  }
  return code;
}

int report_unexpected(const std::exception& e) {
  print(str("kiri: ", rank_prefix(job_rank()), "unexpected error: ", e.what()));
  return 1;
}

}  // namespace kiri::cli
