#pragma once
// GPT-2's byte-level BPE, exact: the same ids as OpenAI's encoder.py. Text is
// split by GPT-2's pre-tokenization regex (PCRE2, JIT), each piece's bytes are
// merged by rank, and the pieces are encoded in parallel (the result does not
// depend on the thread count: BPE of a piece is a pure function).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiri/data/tokenizer.h"

namespace kiri::data {

class Gpt2Tokenizer : public Tokenizer {
 public:
  // Raises kData naming the file when either is missing or malformed.
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  ~Gpt2Tokenizer() override;

  // <|endoftext|> is not recognised in text (as in GPT-2's encoder): it is
  // spelled out like any other text. Append eot_token() to separate documents.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
  std::string name() const override { return "gpt2"; }
  int32_t eot_token() const override { return eot_; }
  std::vector<TokenizerFile> files() const override {
    return {{"vocab.json", encoder_json_path_}, {"merges.txt", vocab_bpe_path_}};
  }

  // The pre-tokens of text as (offset, length) byte spans that tile it. Bytes
  // that are not valid UTF-8 (which the regex never matches) become pieces of
  // their own, so any input is covered.
  std::vector<std::pair<size_t, size_t>> pretokenize(std::string_view text) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  struct Regex;
  struct Cache;  // pre-token -> ids, one per thread

  void load_encoder(const std::string& path, std::unordered_map<std::string, int32_t>& by_unicode);
  void load_merges(const std::string& path,
                   const std::unordered_map<std::string, int32_t>& by_unicode);
  // Appends the ids of one pre-token to out.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, std::span<const std::pair<size_t, size_t>> pieces,
                     Cache& cache, std::vector<int32_t>& out) const;

  std::unique_ptr<Regex> regex_;
  std::vector<std::string> id_bytes_;           // id -> the raw bytes it stands for
  std::array<int32_t, 256> byte_id_{};          // byte -> its single-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
  int32_t eot_ = -1;
  std::string encoder_json_path_, vocab_bpe_path_;
};

// GPT-2's reversible map from bytes to printable code points (encoder.py's
// bytes_to_unicode): the alphabet that encoder.json and vocab.bpe are written in.
std::array<char32_t, 256> gpt2_bytes_to_unicode();

}  // namespace kiri::data
