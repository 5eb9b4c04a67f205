#pragma once
// Hugging Face tokenizers from their files: a folder holding tokenizer.json
// (preferred) or vocab.json + merges.txt, or a tokenizer.json file itself.
// Byte-level BPE only (GPT-2, Llama 3, ...); anything else in tokenizer.json
// is a named error, never ignored. Encoding follows Hugging Face's
// tokenizer.encode(text, add_special_tokens=False): added tokens (such as
// <|endoftext|>) written in the text are split out first and become their ids;
// the post-processor's BOS/EOS are not added (a corpus is cut into samples
// anywhere, so a BOS per encode() call would land mid-stream).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiri/data/bpe_core.h"
#include "kiri/data/tokenizer.h"

namespace kiri::data {

class HfTokenizer : public Tokenizer {
 public:
  // Raises kData naming the file (and the key) when a file is missing,
  // malformed, or asks for something kiri does not do.
  explicit HfTokenizer(const std::string& path);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override { return core_->encode(text); }
  std::string decode(std::span<const int32_t> ids) const override { return core_->decode(ids); }
  int vocab_size() const override { return core_->vocab_size(); }
  // "hf-" and 8 hex digits of a hash of the vocabulary, merges and special tokens.
  std::string name() const override { return name_; }
  int32_t eot_token() const override { return eot_; }
  // The beginning-of-text token (tokenizer_config.json's bos_token), or -1.
  int32_t bos_token() const { return bos_; }
  std::vector<TokenizerFile> files() const override { return files_; }

 private:
  std::unique_ptr<BpeCore> core_;
  std::string name_;
  int32_t eot_ = -1, bos_ = -1;
  std::vector<TokenizerFile> files_;
};

// An added token of tokenizer.json (or tokenizer_config.json's added_tokens_decoder).
struct HfAddedToken {
  std::string content;
  int32_t id = -1;
};

// Reads a tokenizer.json (its text, already read from `path`) into a BpeCore;
// `added` gets its added tokens. Raises kData naming the key and value of
// anything unsupported.
std::unique_ptr<BpeCore> load_tokenizer_json(const std::string& path, const std::string& text,
                                             std::vector<HfAddedToken>& added);

}  // namespace kiri::data
