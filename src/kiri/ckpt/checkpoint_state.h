#pragma once
// state.json of a checkpoint step directory (docs/checkpoints.md), parsed and checked
// without touching the model: the trainer, `kiri eval` / `sample` and the fuzz target
// share it. Every value that could not have been written by kiri is a kCheckpoint error
// naming the file, the key and the value (quoted within bounds).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/base/json_guard.h"  // json_duplicate_key

namespace kiri::ckpt {

inline constexpr int kCheckpointFormatVersion = 2;
// Nothing kiri writes nests deeper than 4 levels (config.parallel.*); 64 leaves room and
// keeps a recursive parser or dump() far from the stack's end.
inline constexpr int kMaxStateDepth = 64;
// state.json is a few KiB; a bigger one is damaged or hostile.
inline constexpr uint64_t kMaxStateBytes = uint64_t{64} << 20;
// The largest step and optimizer step accepted (train.steps' own bound).
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 40;

// The fp16 loss scaler's state (optim::DynamicLossScaler::State, field for field: the
// trainer converts; the checkpoint layer does not link the optimizer).
struct LossScalerState {
  double scale;
  int64_t clean_steps;
  int64_t skipped_steps;
};

struct CheckpointState {
  int format_version = 0;
  int64_t step = 0;
  uint64_t data_position = 0;  // sequences consumed
  int64_t optimizer_step = 0;
  std::vector<std::string> optimizer_files;  // plain names in the step directory
  std::optional<LossScalerState> loss_scaler;
  nlohmann::json layout;  // as written ({dp, tp, pp, zero_stage, ...}); null when absent
  nlohmann::json config;  // the run's config (an object), null when absent
  nlohmann::json files;   // the manifest (checkpoint_manifest.h), null in an older kiri's

  // Sequences per step; 0 when absent.
  int64_t global_batch = 0;
  // The tokenizer's and the data's (fingerprint.h); null when absent.
  nlohmann::json fingerprints;
};

// Parses state.json's `text` and verifies its checksum (when it has one); `where` names it
// in messages ("runs/x/step_00000010/state.json").
CheckpointState parse_checkpoint_state(std::string_view text, const std::string& where);

// Reads and parses dir/state.json (a regular file of at most kMaxStateBytes; a FIFO or a
// directory there is an error, not a hang), and checks the files of its manifest
// (verify_checkpoint_files): every reader of a checkpoint goes through here.
CheckpointState read_checkpoint_state(const std::string& dir);

// --init-from's folder: a folder with config.json and weights (an HF model folder or a kiri
// step folder), or a kiri checkpoint root (its `latest`). kCheckpoint naming the path
// otherwise.
std::string resolve_model_folder(const std::string& path);

}  // namespace kiri::ckpt
