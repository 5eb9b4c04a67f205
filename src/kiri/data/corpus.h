#pragma once
// Turns a text file into train/val token shards, once: ensure_prepared reuses
// the shards of an earlier run so a trainer does not re-tokenize on every start.
#include <cstdint>
#include <string>
#include <vector>

#include "kiri/data/documents.h"
#include "kiri/data/tokenizer.h"

namespace kiri::data {

struct PreparedCorpus {
  std::string train_path;  // out_dir/train.bin
  std::string val_path;    // out_dir/val.bin
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  uint64_t documents = 0;
  bool reused = false;  // ensure_prepared found current shards and wrote nothing
};

// The manifest beside the shards (docs/data.md, "Manifest").
inline constexpr const char* kManifestName = "corpus.json";
inline constexpr int kManifestFormat = 2;

// How many of n tokens go to validation: round(n * val_fraction), at least 1
// and leaving at least 1 for training. Raises kInvalidArgument unless
// 0 < val_fraction < 1 and n >= 2.
uint64_t val_token_count(uint64_t n, double val_fraction);

// `kiri data`: reads the files (expand_inputs) as documents (append_documents),
// joins them with the end-of-text token, and writes the first tokens to
// out_dir/train.bin and the last val_fraction of them to out_dir/val.bin, then
// out_dir/corpus.json: tokenizer, vocab, counts, documents, per-shard checksums
// and the sources. No files or no tokens is kData.
PreparedCorpus build_corpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                            const std::string& out_dir, double val_fraction,
                            const DocumentOptions& opts);

// build_corpus of one text (or, by its extension, JSON Lines) file; missing or
// empty: kData naming it. The manifest also records the text's path and size.
PreparedCorpus prepare_corpus(const std::string& text_path, const Tokenizer& tokenizer,
                              const std::string& out_dir, double val_fraction);

// prepare_corpus, unless out_dir already holds shards made from this text
// (same path and size, shards newer than the text) with this tokenizer and
// val_fraction; then it only returns their paths and counts.
PreparedCorpus ensure_prepared(const std::string& text_path, const Tokenizer& tokenizer,
                               const std::string& out_dir, double val_fraction);

}  // namespace kiri::data
