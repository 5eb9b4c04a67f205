#pragma once
// The per-step record: printed as the progress line by rank 0 and appended
// as one JSON line to the metrics file (schema in docs/metrics.md).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiri/base/record_file.h"
#include "kiri/base/timer.h"
#include "kiri/comm/communicator.h"
#include "kiri/tensor/allocator.h"

namespace kiri::train {

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  int64_t total_steps = 0;
  double loss = 0;  // mean over the tokens of the global batch
  double lr = 0;
  double grad_norm = 0;
  int64_t tokens = 0;  // tokens in this step's global batch
  double step_s = 0;
  double tokens_per_s = 0;
  // Model FLOPs/s of this rank over its peak FLOP/s (kernels::peak_flops or
  // --peak-flops); <= 1 when the peak is right. mfu_gemm: the same over the
  // fp32 GEMM rate measured at start (docs/metrics.md).
  double mfu = 0;
  double mfu_gemm = 0;
  std::string mfu_peak;         // what mfu is against, e.g. "measured: avx512 vdpbf16ps, ..."
  std::string gemm_lowp;        // the 16-bit GEMMs' path ("onednn", "via_f32"); "" in fp32
  double elapsed_s = 0;         // wall time since Trainer::run() began (a resume: since then)
  std::optional<double> eta_s;  // to train.steps, from the mean of recent steps
  std::optional<double> val_loss;
  bool skipped = false;              // the update was skipped (non-finite gradients)
  std::optional<double> loss_scale;  // fp16: the loss scale this step used
  int64_t skipped_steps = 0;         // fp16: steps skipped so far
  MemoryStats mem;  // RAM per category (current) and the NVMe tier (nvme); docs/metrics.md
  // Offload (docs/offload.md): bytes this rank's swap files moved in the step, and the
  // seconds the step waited on that I/O (what the overlap did not hide). 0 without offload.
  int64_t offload_read_bytes = 0, offload_written_bytes = 0;
  double offload_wait_s = 0;
  // Across hosts, on the steps of a link probe (parallel/link_probe.h; rank 0): each host's
  // rate by hostname, and the hosts whose link is slow.
  std::vector<std::pair<std::string, double>> link_bytes_per_s;
  std::vector<std::string> slow_hosts;
  // Per operation kind, what this rank's communicators did in the step.
  std::vector<std::pair<std::string, comm::OpStats>> comm;
  // Pipeline parallelism: the share of the step's pipeline schedule in which
  // this rank (rank 0: stage 0) was not computing (the measured bubble).
  std::optional<double> bubble;
};

std::string metrics_json_line(const StepMetrics& m);
// The line `kiri train` prints every log.every steps. Short, it fits in kProgressColumns
// (fields dropped by priority: loss, val, tok/s and the step stay; the metrics file has them
// all), with a slow link on a line of its own; verbose (`kiri train --verbose`), every field.
inline constexpr size_t kProgressColumns = 120;
std::string progress_line(const StepMetrics& m, bool verbose = false);
// "7s", "1m23s", "2h05m09s" (whole seconds, rounded down).
std::string format_duration(double seconds);

// Elapsed time since construction, and the ETA from the mean wall time of
// the last `window` steps.
class StepClock {
 public:
  explicit StepClock(size_t window = 10) : window_(window) {}
  // At the end of a step's loop (its evaluation included): m.elapsed_s, and
  // m.eta_s for the steps left.
  void mark(StepMetrics& m, int64_t remaining_steps);
  void add(double seconds);
  // Mean of the recent steps x remaining; nullopt before the first step.
  std::optional<double> eta(int64_t remaining_steps) const;

 private:
  size_t window_;
  std::vector<double> recent_;  // oldest first
  Timer timer_;
  double last_mark_ = 0;
};

// `flops` if it is a usable --peak-flops (positive, finite), else kConfig.
double check_peak_flops(double flops);
// Model FLOPs/s over `peak` (FLOP/s), KIRI_CHECK that the peak is positive.
double model_flops_utilization(double model_flops_per_s, double peak);

// Appends lines; creates the file's folder. A run that starts from step 0
// truncates the file, a resumed one appends. Every write is checked (RecordFile,
// base/record_file.h): a row that cannot be written in full is a kIo error naming the
// file, the step and the reason, so the run stops rather than train without a record
// (docs/metrics.md); the last step's row, and a row at least every 60 s, is synced.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append) : file_(path, append, "metrics file") {}
  void write(const StepMetrics& m);
  // Syncs and closes the file, kIo on failure; the destructor does it otherwise.
  void close() { file_.close(); }
  bool enabled() const { return file_.enabled(); }

 private:
  RecordFile file_;
};

// FLOP/s of one 1024^3 fp32 GEMM (oneDNN sgemm) on the current OpenMP
// threads, the best of 3 after a warm-up (kernels::measure_gemm_flops, the
// measurement kiri plan --calibrate stores too): mfu_gemm's denominator. A
// sustained rate, not a peak (kernels/peak.h).
double measure_gemm_flops_rate();

}  // namespace kiri::train
