#pragma once
// Tokenizers turn text into token ids and back. Two exist: "byte" (one token
// per byte, plus an end-of-text token: vocab 257) and "gpt2" (GPT-2's
// byte-level BPE, vocab 50257).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiri::data {

// A file a tokenizer was read from, and its name in a Hugging Face model folder
// (GPT-2's encoder.json is HF's vocab.json, vocab.bpe its merges.txt).
struct TokenizerFile {
  std::string hf_name;  // "vocab.json", "merges.txt", "tokenizer.json", ...
  std::string path;     // where this tokenizer read it
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Any bytes are accepted, valid UTF-8 or not; decode(encode(s)) == s.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Raises kInvalidArgument on an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual int vocab_size() const = 0;
  virtual std::string name() const = 0;
  // The end-of-text token, or -1 when the tokenizer has none.
  virtual int32_t eot_token() const = 0;
  // The files to copy into a model folder so that transformers' AutoTokenizer
  // loads this tokenizer; empty when it has none (byte).
  virtual std::vector<TokenizerFile> files() const { return {}; }
};

// One token per byte: id == byte value; id 256 is the end-of-text token that
// separates documents (never produced by encode; decoded as "<|endoftext|>").
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEot = 256;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int vocab_size() const override { return kEot + 1; }
  std::string name() const override { return "byte"; }
  int32_t eot_token() const override { return kEot; }
};

// "byte", "gpt2" (reads data_dir/gpt2/encoder.json and data_dir/gpt2/vocab.bpe), or the
// path of a Hugging Face tokenizer (hf_tokenizer.h): a folder with tokenizer.json or
// vocab.json + merges.txt, or a tokenizer.json file. An unknown name raises kConfig; a
// missing, malformed or unsupported file raises kData naming it.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& data_dir);

}  // namespace kiri::data
