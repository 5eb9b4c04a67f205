#pragma once
// Tests that damage a checkpoint on purpose to reach a check behind the integrity checks
// (docs/checkpoints.md, "Integrity") write the file as kiri's own writer would: with fresh
// checksums, and state.json sealed again over the step folder's files as they now are.
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiri/ckpt/checkpoint_manifest.h"
#include "kiri/ckpt/safetensors.h"

namespace kiri::testing {

// Recomputes dir/state.json's manifest and checksum (keeping every other field).
inline void reseal_checkpoint(const std::string& dir) {
  std::ifstream in(dir + "/state.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json state = nlohmann::json::parse(text.str());
  state.erase("checksum");
  state.erase("files");
  kiri::ckpt::write_checkpoint_state(dir, state.dump());
}

// Metadata without the checksum keys (save_safetensors with Checksums::kXxh3 writes new ones).
inline std::map<std::string, std::string> without_checksums(
    const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : metadata)
    if (k != ckpt::kChecksumKey && k.rfind(ckpt::kChecksumPrefix, 0) != 0) out[k] = v;
  return out;
}

}  // namespace kiri::testing
