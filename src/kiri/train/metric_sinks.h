#pragma once
// Where rank 0's per-step record goes besides the progress line (docs/metrics.md):
// log.metrics (metrics.jsonl, the whole record), and when asked, log.csv (metrics.csv) and
// log.tensorboard (an event file in run.dir). scalar_row() is the one place that turns a
// step's record into the scalars that the CSV and TensorBoard sinks format.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiri/base/record_file.h"
#include "kiri/config/run_config.h"
#include "kiri/tensorboard/event_file.h"
#include "kiri/train/metrics.h"

namespace kiri::train {

// A step's scalars in a fixed order, each named as a CSV column and a TensorBoard tag:
// loss, val_loss, lr, grad_norm, tokens_per_s, step_s, mfu, mem/<category> (bytes, as
// metrics.jsonl's mem), comm/bytes_sent and comm/bytes_received (summed over the operation
// kinds of metrics.jsonl's comm). nullopt where the step has none (val_loss off the
// evaluation steps).
using ScalarRow = std::vector<std::pair<std::string, std::optional<double>>>;
ScalarRow scalar_row(const StepMetrics& m);

// metrics.csv's header ("step," and scalar_row's names) and a step's line (values as %.17g,
// which reads back to the same double; an empty cell for nullopt), each with its newline.
std::string csv_header();
std::string csv_line(const StepMetrics& m);

// log.csv's file: run.dir/metrics.csv. log.tensorboard's folder: run.dir.
std::string csv_path(const RunConfig& cfg);
std::string tensorboard_dir(const RunConfig& cfg);

// A resumed run at `step`: keeps metrics.csv's header and its rows of steps 1..step (an
// earlier, longer attempt's and a torn last line go) and returns how many rows it dropped.
// A header other than csv_header() is a kConfig error naming the file (its columns are not
// this kiri's: move it away). A missing file is left missing.
int64_t keep_csv_through(const std::string& path, int64_t step);

class MetricSinks {
 public:
  // Rank 0's sinks (`write` true) for a run that starts at `step`: 0 truncates the files, a
  // resumed run appends to metrics.jsonl and metrics.csv (kept through its step) and starts
  // a new event file. Other ranks pass write = false and get sinks that ignore records.
  MetricSinks(const RunConfig& cfg, bool write, int64_t step);
  void write(const StepMetrics& m);
  // Syncs and closes every file, kIo on failure; the destructors do it otherwise.
  void close();

 private:
  MetricsWriter jsonl_;
  RecordFile csv_;
  std::optional<tensorboard::EventFile> events_;
};

}  // namespace kiri::train
