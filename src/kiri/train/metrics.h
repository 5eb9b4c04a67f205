#pragma once
// The per-step record: printed as the progress line by rank 0 and appended
// as one JSON line to the metrics file (schema in docs/metrics.md).
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  double mfu = 0;  // model FLOPs/s over the GEMM peak measured at start
  std::optional<double> val_loss;
  bool skipped = false;              // the update was skipped (non-finite gradients)
  std::optional<double> loss_scale;  // fp16: the loss scale this step used
  int64_t skipped_steps = 0;         // fp16: steps skipped so far
  MemoryStats mem;
  // Per operation kind, what this rank's communicators did in the step.
  std::vector<std::pair<std::string, comm::OpStats>> comm;
  // Pipeline parallelism: the share of the step's pipeline schedule in which
  // this rank (rank 0: stage 0) was not computing (the measured bubble).
  std::optional<double> bubble;
};

std::string metrics_json_line(const StepMetrics& m);
std::string progress_line(const StepMetrics& m);

// Appends lines; creates the file's folder. A run that starts from step 0
// truncates the file, a resumed one appends.
class MetricsWriter {
 public:
  MetricsWriter(const std::string& path, bool append);
  void write(const StepMetrics& m);
  bool enabled() const { return out_.is_open(); }

 private:
  std::ofstream out_;
};

// FLOP/s of one large fp32 GEMM on this machine with the current threads:
// the peak MFU is measured against.
double measure_gemm_peak_flops();

}  // namespace kiri::train
