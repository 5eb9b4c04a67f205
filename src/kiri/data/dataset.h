#pragma once
// A folder of token shards to train on (data.dir): what `kiri data --out DIR`
// writes (with its corpus.json), nanoGPT's train.bin / val.bin, or llm.c's
// *train*.bin / *val*.bin shards. Every file is memory-mapped, and its format
// is read from its first bytes, never guessed from its name.
#include <cstdint>
#include <string>

#include "kiri/data/token_source.h"

namespace kiri::data {

// The tokenizer, as data.tokenizer names it, that made the kiri shards in `dir`: the copy of
// its files that `kiri data` keeps in dir/tokenizer (corpus.json's "tokenizer_files"), or
// "byte" or "gpt2"; "" when the folder does not say (no corpus.json: nanoGPT's or llm.c's
// shards, or an older kiri's Hugging Face tokenizer, named by hash alone). kData naming the
// folder when the manifest names a copy that is missing.
std::string shards_tokenizer(const std::string& dir);

struct Dataset {
  std::string dir;
  std::string layout;     // "kiri", "nanoGPT", "llm.c" or "mixed"
  std::string tokenizer;  // kiri shards: the tokenizer that made them; "" when unknown
  TokenSource train, val;
  // Fine-tuning data (`kiri data --format chat|prompt-completion`): one 0/1 per token of
  // train and val, 1 where the loss is taken; empty when the folder has no masks.
  TokenSource train_mask, val_mask;
};

// Maps the folder's shards. kiri's (corpus.json present): the shards the
// manifest lists, each header agreeing with it (count, tokenizer, checksum).
// Otherwise the *.bin files whose names hold "train" (the training split, in
// name order) and "val" (validation). Raises kData naming the folder or file:
// not a folder, no train or no val file, a header that does not fit its file,
// a manifest that disagrees with a shard, a loss mask that disagrees with its shard or
// masks on some shards only. Checksums and token ranges are
// checked by TokenSource::verify (one pass, before training).
Dataset open_dataset(const std::string& dir);

}  // namespace kiri::data
