#pragma once
// One run, one folder (docs/checkpoints.md, "Run folders"): run.dir holds the
// run's config.json, metrics.jsonl, metrics.png and checkpoints/. A fresh run
// refuses a folder that holds another run's checkpoints or metrics; --overwrite
// clears kiri's files there first; a resumed run keeps the metrics up to its
// step and appends, and the plot is drawn from the whole file.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/plot/plot.h"

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
// each only when it lies inside run.dir or checkpoint.dir, and run.dir's metrics.csv and
// TensorBoard event files (events.out.tfevents.*). Returns what it removed.
std::vector<std::string> clear_run_dir(const RunConfig& cfg);

// One writer per folder (docs/checkpoints.md, "One run per folder"): an exclusive
// flock(2) on <dir>/.kiri.lock, which records the holder (pid, host, start time) for
// the message a second writer gets. The kernel releases a flock when its holder
// dies, so a lock file left by a killed run does not block the next one; a clean
// exit removes the file. Where the filesystem has no flock (ENOLCK, EOPNOTSUPP:
// some NFS and FUSE mounts) the record alone decides: a live pid on this host, or
// any other host, holds the folder; a dead pid on this host is stale.
class RunLock {
 public:
  static constexpr const char* kFileName = ".kiri.lock";
  RunLock() = default;
  ~RunLock();  // releases every folder's lock, removing its file
  RunLock(RunLock&& other) noexcept : held_(std::move(other.held_)) { other.held_.clear(); }
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Locks `dir` (creating it) for this process: kConfig naming the holder when
  // another process holds it ("runs/kiri is in use by pid 1234 on host h since
  // 2026-12-01T09:44:00Z ..."), kIo when the lock file cannot be made or locked.
  void acquire(const std::string& dir);
  // The lock files held.
  std::vector<std::string> files() const;

 private:
  struct Held {
    std::string file;
    int fd = -1;  // -1: no flock on that filesystem, the record alone
  };
  // Locks h (open), or raises naming the holder; false when h's file was replaced
  // meanwhile (try again).
  bool lock_or_judge(Held& h, const std::string& dir);
  std::vector<Held> held_;
};

// Rank 0 locks run.dir, and checkpoint.dir where it lies outside run.dir, before the
// run touches either; rank 0's result is broadcast, so that when it cannot, every
// rank raises its error at once (kConfig: printed once) instead of waiting in the
// first collective. Other ranks hold nothing.
RunLock lock_run_folder(const RunConfig& paths, comm::Communicator& world);

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
std::vector<plot::Series> loss_plot_series(const LossHistory& h);

}  // namespace kiri::train
