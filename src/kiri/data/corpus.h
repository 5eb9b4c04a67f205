#pragma once
// Turns a text file into train/val token shards, once: ensure_prepared reuses
// the shards of an earlier run so a trainer does not re-tokenize on every start.
#include <cstdint>
#include <string>

#include "kiri/data/tokenizer.h"

namespace kiri::data {

struct PreparedCorpus {
  std::string train_path;  // out_dir/train.bin
  std::string val_path;    // out_dir/val.bin
  uint64_t train_tokens = 0;
  uint64_t val_tokens = 0;
  bool reused = false;  // ensure_prepared found current shards and wrote nothing
};

// How many of n tokens go to validation: round(n * val_fraction), at least 1
// and leaving at least 1 for training. Raises kInvalidArgument unless
// 0 < val_fraction < 1 and n >= 2.
uint64_t val_token_count(uint64_t n, double val_fraction);

// Reads the UTF-8 text file (missing or empty: kData naming it), encodes it,
// and writes the first tokens to out_dir/train.bin and the last val_fraction
// of them to out_dir/val.bin, plus out_dir/corpus.json describing the source.
PreparedCorpus prepare_corpus(const std::string& text_path, const Tokenizer& tokenizer,
                              const std::string& out_dir, double val_fraction);

// prepare_corpus, unless out_dir already holds shards made from this text
// (same path and size, shards newer than the text) with this tokenizer and
// val_fraction; then it only returns their paths and counts.
PreparedCorpus ensure_prepared(const std::string& text_path, const Tokenizer& tokenizer,
                               const std::string& out_dir, double val_fraction);

}  // namespace kiri::data
