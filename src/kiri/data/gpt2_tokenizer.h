#pragma once
// GPT-2's byte-level BPE, exact: the same ids as OpenAI's encoder.py. Text is
// split by GPT-2's pre-tokenization regex, each piece's bytes are merged by
// rank, and the pieces are encoded in parallel (bpe_core.h).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiri/data/bpe_core.h"
#include "kiri/data/tokenizer.h"

namespace kiri::data {

// GPT-2's pre-tokenization regex, verbatim from encoder.py (also Hugging Face's
// ByteLevel pre-tokenizer's, with use_regex).
extern const char* const kGpt2Pattern;

class Gpt2Tokenizer : public Tokenizer {
 public:
  // Raises kData naming the file when either is missing or malformed.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  ~Gpt2Tokenizer() override;

  // <|endoftext|> is not recognised in text (as in GPT-2's encoder): it is
  // spelled out like any other text. Append eot_token() to separate documents.
  std::vector<int32_t> encode(std::string_view text) const override { return core_.encode(text); }
  std::string decode(std::span<const int32_t> ids) const override { return core_.decode(ids); }
  int vocab_size() const override { return core_.vocab_size(); }
  std::string name() const override { return "gpt2"; }
  int32_t eot_token() const override { return eot_; }
  std::vector<TokenizerFile> files() const override {
    return {{"vocab.json", encoder_json_path_}, {"merges.txt", vocab_bpe_path_}};
  }

  // The pre-tokens of text as (offset, length) byte spans that tile it. Bytes
  // that are not valid UTF-8 (which the regex never matches) become pieces of
  // their own, so any input is covered.
  std::vector<std::pair<size_t, size_t>> pretokenize(std::string_view text) const {
    return core_.pretokenize(text);
  }

 private:
  BpeCore core_;
  int32_t eot_ = -1;
  std::string encoder_json_path_, vocab_bpe_path_;
};

// GPT-2's reversible map from bytes to printable code points (encoder.py's
// bytes_to_unicode): the alphabet that encoder.json and vocab.bpe are written in.
std::array<char32_t, 256> gpt2_bytes_to_unicode();

// Decodes a token as written in those files (UTF-8 over the bytes_to_unicode
// alphabet) back to raw bytes; false on a character outside the alphabet.
bool gpt2_unicode_to_bytes(std::string_view token, std::string& out);

// Reads encoder.json (token -> id) and vocab.bpe (merges, one "a b" a line) into
// core; `label` starts messages ("gpt2": "gpt2 encoder PATH ..."; Hugging Face's
// names are vocab.json and merges.txt). Every merge must use tokens that earlier
// merges made (so that the heap's order is encoder.py's); raises kData naming
// the file (and line) otherwise or when a file is missing or malformed.
void load_gpt2_files(BpeCore& core, const std::string& encoder_json_path,
                     const std::string& vocab_bpe_path, std::string_view label);

}  // namespace kiri::data
