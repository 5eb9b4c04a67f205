#pragma once
// The checkpoints of a training run (docs/checkpoints.md): what a save gathers from the
// optimizer and the model, synchronously or through the background writer
// (checkpoint.async), and what a resume or --init-from loads back into them. The Trainer owns
// one and calls it; it holds the checkpoint state (the writer and its staging buffers, the
// last save's timings, the run's fingerprints, --accept-data-change).
//
// It lives in train/, not ckpt/: docs/design.md's layer table lets ckpt link only tensor,
// data and nlohmann_json, and a save reaches the optimizer's states, the model's shards over
// comm and the parallel dims. ckpt/ keeps what needs none of them, which this class calls:
// the formats, the directory protocol (begin, commit, latest, keep_last), state.json and its
// manifest, the async writer and the Hugging Face folders.
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/timer.h"
#include "kiri/ckpt/checkpoint_async.h"
#include "kiri/comm/communicator.h"
#include "kiri/config/run_config.h"
#include "kiri/data/tokenizer.h"
#include "kiri/model/parallelize.h"
#include "kiri/optim/adamw.h"
#include "kiri/optim/loss_scaler.h"
#include "kiri/parallel/dims.h"

namespace kiri::train {

// kCheckpoint unless `t` (F32) holds only finite values: names `what`, the first bad
// element and its value. Checkpoint loading runs it on every tensor it reads.
void check_finite(const Tensor& t, const std::string& what);

// What a checkpoint saves and loads: the trainer's, which outlive the manager.
struct CheckpointParts {
  const RunConfig& cfg;
  // The config as given, vocabulary resolved: state.json's "config".
  const std::string& config_json;
  comm::Communicator& world;
  Allocator& allocator;
  parallel::ParallelDims& dims;
  model::ParallelGPT& parallel;
  optim::AdamW& optimizer;
  const data::Tokenizer& tokenizer;
};

class CheckpointManager {
 public:
  // `fingerprints`: rank 0's {"tokenizer": ..., "data": ...} of this run (fingerprint.h), for
  // state.json and the resume's check. With checkpoint.async and a checkpoint.dir, the writer
  // and its staging buffers are reserved (and touched) now, so that the first save's stall is
  // a copy like every later one's, not the kernel faulting in its pages.
  CheckpointManager(CheckpointParts parts, nlohmann::json fingerprints);
  // fp16: the loss scaler, built after the staging buffers; its state is saved and restored.
  void set_loss_scaler(optim::DynamicLossScaler* scaler) { scaler_ = scaler; }

  // Trainer::save_checkpoint: <checkpoint.dir>/step_<step> holding the training position.
  std::string save(int64_t step, uint64_t data_position);
  // Waits for an asynchronous save in flight, raising its failure (no-op without one).
  void wait();
  // A failed background save, raised at the step after it (checkpoint_async.h).
  void rethrow_failure();
  double last_save_seconds() const { return last_save_s_; }
  double last_save_wait_seconds() const { return last_save_wait_s_; }

  // Trainer::load_checkpoint: sets `step` and `data_position` as it reads state.json.
  void load(const std::string& path, int64_t& step, uint64_t& data_position);
  // Trainer::init_from.
  void init_from(const std::string& path);
  void accept_data_change(bool accept) { accept_data_change_ = accept; }
  // Trainer::gather_model.
  std::vector<std::pair<std::string, Tensor>> gather_model();

 private:
  bool is_rank0() const { return p_.world.rank() == 0; }
  // Whether this rank writes its optimizer states (one copy per shard).
  bool writes_optimizer_states() const;
  int optimizer_writers_per_stage() const;
  int optimizer_writers() const;     // optimizer files per checkpoint
  int optimizer_file_index() const;  // this rank's, when it writes one
  // state.json.
  std::string checkpoint_state_text(int writers, int64_t step, uint64_t data_position) const;
  // save's async part.
  std::string stage_checkpoint(const Timer& timer, int64_t step, uint64_t data_position);
  void reserve_async_staging();  // the writer and its staging buffers, touched
  // Rank 0's model staging (collective).
  std::exception_ptr stage_model(ckpt::AsyncSaveJob& job, int64_t step);
  // This rank's part of load.
  void read_checkpoint(const std::string& path, int64_t& step, uint64_t& data_position);
  void load_model(const std::string& dir);  // a model folder's weights (hf_model.h)
  void load_optimizer_states(const std::string& dir, const std::vector<std::string>& files);

  CheckpointParts p_;
  optim::DynamicLossScaler* scaler_ = nullptr;
  // checkpoint.async: the background writer and its staging buffers (the trainer's
  // allocator's, which outlives the manager).
  std::unique_ptr<ckpt::AsyncCheckpointWriter> async_;
  double last_save_s_ = 0, last_save_wait_s_ = 0;
  nlohmann::json fingerprints_;
  bool accept_data_change_ = false;
};

}  // namespace kiri::train
