#pragma once
// One run, one folder (docs/checkpoints.md, "Run folders"): run.dir holds the
// run's config.json, metrics.jsonl, metrics.png and checkpoints/. A fresh run
// refuses a folder that holds another run's checkpoints or metrics; --overwrite
// clears kiri's files there first; a resumed run keeps the metrics up to its
// step and appends, and the plot is drawn from the whole file.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/train/plot.h"
#include "kiri/train/run_config.h"

namespace kiri::train {

// What a run folder (the run's checkpoint.dir and log.metrics) already holds.
struct RunDirContents {
  std::vector<int64_t> checkpoints;  // steps of the committed step directories
  bool latest = false;               // checkpoint.dir/latest exists
  int64_t metrics_rows = 0;          // complete lines of log.metrics
  int64_t metrics_last_step = 0;     // the highest step among them
  bool holds_a_run() const { return !checkpoints.empty() || latest || metrics_rows > 0; }
  // "checkpoints up to step 200, metrics up to step 210"
  std::string describe() const;
};
// Of a config whose paths are resolved (resolve_run_paths).
RunDirContents inspect_run_dir(const RunConfig& cfg);

// A fresh start: a kConfig error naming run.dir, what it holds, --resume auto and
// --overwrite when the folder holds a run.
void refuse_used_run_dir(const RunConfig& cfg);

// --overwrite: removes the previous run's step directories (and their temporary
// ones) and `latest` in checkpoint.dir, its metrics, plot and run.dir/config.json,
// each only when it lies inside run.dir or checkpoint.dir. Returns what it removed.
std::vector<std::string> clear_run_dir(const RunConfig& cfg);

// Writes run.dir/config.json atomically (creating run.dir) and returns its path.
std::string write_run_config(const RunConfig& cfg, const std::string& json);

// A resumed run at `step`: keeps the metrics rows of steps 1..step (dropping those
// of an earlier, longer attempt and a torn last line) and returns how many rows it
// dropped. A missing file is left missing.
int64_t keep_metrics_through(const std::string& path, int64_t step);

// The loss history of a metrics file: the train loss of every step and the
// validation loss where it was evaluated, in file order.
struct LossHistory {
  std::vector<double> steps, loss;
  std::vector<double> val_steps, val_loss;
};
LossHistory read_loss_history(const std::string& metrics_path);
// The curves of the loss plot (train, validation).
std::vector<Series> loss_plot_series(const LossHistory& h);

}  // namespace kiri::train
