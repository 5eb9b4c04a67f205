#pragma once
// What makes a checkpoint step directory trustworthy (docs/checkpoints.md, "Integrity"):
//  - state.json's "checksum": XXH3-64 of the state itself (its compact JSON without the
//    "checksum" key), so an edited or damaged field is named instead of believed;
//  - state.json's "files": the manifest, one entry per file of the directory with its size
//    and digest (a safetensors file's header digest, which covers its per-tensor checksums,
//    and its training step; any other file's XXH3-64), so a file of another checkpoint copied
//    in is named even though its own checksums hold.
// The tensors' own checksums live in each safetensors file (ckpt/safetensors.h) and are
// verified as the tensors are read.
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/checkpoint_state.h"

namespace kiri::ckpt {

// The metadata key of the training step in the safetensors files of a checkpoint.
inline constexpr const char* kStepMetadataKey = "kiri.step";
// The data position (sequences consumed) in an optimizer file's metadata.
inline constexpr const char* kDataPositionMetadataKey = "kiri.data_position";

// Writes dir/state.json: state_text (a JSON object) with the manifest of the files in dir
// (every regular file but state.json and hidden ones) and the checksum added.
void write_checkpoint_state(const std::string& dir, const std::string& state_text);

// Verifies a parsed state.json's "checksum" (called by parse_checkpoint_state); a state with
// a manifest but no checksum, or the other way round, is damaged. A state with neither is an
// older kiri's and passes.
void verify_state_checksum(const nlohmann::json& state, const std::string& where);

// Checks every file of state.files in dir: present, of the recorded size and digest, and a
// safetensors file of this step. kCheckpoint naming the file and both values.
void verify_checkpoint_files(const std::string& dir, const CheckpointState& state);

// --resume auto's checkpoint in the checkpoint root: the one `latest` names when it is
// complete (its state and manifest verify); else, when `latest` is missing or names an
// incomplete folder, the newest complete step folder, with *note saying why and which
// (empty otherwise). "" when the root holds no checkpoint at all; kCheckpoint naming each
// folder's defect when it holds only incomplete ones.
std::string find_resume_checkpoint(const std::string& root, std::string* note);

}  // namespace kiri::ckpt
