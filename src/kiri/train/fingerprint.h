#pragma once
// What a checkpoint records of the tokenizer and the token shards a run trained on
// (state.json's "fingerprints", docs/checkpoints.md), so that a resume on data or a
// tokenizer changed under the same path is refused by name instead of continuing on other
// tokens. Hashes are FNV-1a 64 (kiri/base/hash.h), the shards' own checksum.
#include <string>

#include <nlohmann/json.hpp>

#include "kiri/data/dataset.h"
#include "kiri/data/tokenizer.h"

namespace kiri::train {

// {"name": "hf-1a2b3c4d", "files": {"tokenizer.json": "<16 hex digits>", ...}}: the
// tokenizer's name and a hash of each file it was read from, under its name in a model
// folder (a checkpoint keeps copies under those names). Raises kData on an unreadable file.
nlohmann::json tokenizer_fingerprint(const data::Tokenizer& tokenizer);

// {"dir": DIR, "train": {"tokens": N, "hash": "<16 hex>"}, "val": {...}}: per split, the
// token count and a hash over its files: a kiri shard contributes its header's payload
// checksum (checked against the payload when the shards are opened), other formats
// (nanoGPT, llm.c) the hash of their token bytes.
nlohmann::json data_fingerprint(const data::Dataset& dataset);

// A resume's check (rank 0): the tokenizer and data of this run against what the checkpoint
// in `checkpoint_dir` recorded (`recorded`: state.json's "fingerprints", null for a
// checkpoint written before they existed: then the tokenizer files are compared with the
// checkpoint's own copies). A change is a kData error naming the tokenizer or split, the
// path, both hashes and --accept-data-change; with `accept` it is returned as a note for the
// log instead ("" when nothing changed).
std::string check_fingerprints(const nlohmann::json& recorded, const nlohmann::json& tokenizer,
                               const nlohmann::json& data, const std::string& checkpoint_dir,
                               const std::string& tokenizer_name, bool accept);

}  // namespace kiri::train
