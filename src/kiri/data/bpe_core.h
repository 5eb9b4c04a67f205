#pragma once
// The machinery of byte-level BPE shared by GPT-2's files and Hugging Face's:
// added tokens split out of the text first (longest match, leftmost), the rest
// split into pre-tokens by a regex (PCRE2, UTF | UCP, JIT), each pre-token's
// bytes merged by rank (a heap over a linked list: the lowest rank first, the
// leftmost on a tie, as Hugging Face's tokenizers do), pre-tokens encoded in
// parallel with a per-thread cache. The ids do not depend on the thread count;
// encode() may be called from several threads at once (documents side by side).
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiri::data {

// Hash for string_view lookups into a map keyed by std::string (no copy per lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeCore {
 public:
  // `what` names the tokenizer in messages ("gpt2", a tokenizer.json path).
  BpeCore(const std::string& pattern, std::string what);
  ~BpeCore();
  BpeCore(const BpeCore&) = delete;
  BpeCore& operator=(const BpeCore&) = delete;

  // Building (by the loaders): the vocabulary, then merges, then finish().
  // set_token raises kData on a repeated id.
  void set_token(int32_t id, std::string bytes);
  // left + right -> merged at this rank; false when the pair is already there
  // (then `replace` says whether this merge takes its place).
  bool add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank, bool replace = false);
  // A pre-token found whole in the vocabulary is that one token (tokenizer.json's
  // ignore_merges, which Llama 3 sets).
  void set_ignore_merges(bool on) { ignore_merges_ = on; }
  // A string matched in the text before pre-tokenization, as one token.
  void add_special(std::string bytes, int32_t id);
  // Checks every byte has a single-byte token; raises kData otherwise.
  void finish();

  std::vector<int32_t> encode(std::string_view text) const;
  // Raises kInvalidArgument on an id that is no token.
  std::string decode(std::span<const int32_t> ids) const;
  // The pre-tokens of text as (offset, length) spans that tile it; bytes that
  // are not valid UTF-8 (which the regex never matches) are pieces of their own.
  std::vector<std::pair<size_t, size_t>> pretokenize(std::string_view text) const;

  int vocab_size() const { return static_cast<int>(id_bytes_.size()); }
  bool has_id(int32_t id) const { return id >= 0 && id < vocab_size() && used_[id]; }
  const std::string& token_bytes(int32_t id) const { return id_bytes_[id]; }
  // The id of these bytes, vocabulary or added, or -1.
  int32_t find(std::string_view bytes) const;
  int32_t byte_token(unsigned char b) const { return byte_id_[b]; }

 private:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  // (left << 32 | right) -> merge, open addressing: the lookup BPE spends its time in.
  class MergeMap {
   public:
    const Merge* find(uint64_t key) const;
    // false when the key was there (then `replace` says whether to overwrite).
    bool insert(uint64_t key, Merge m, bool replace);

   private:
    size_t slot(uint64_t key) const;
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of ids >= 0 makes it
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    size_t size_ = 0;
    int shift_ = 64;
  };
  struct Piece {
    size_t offset;
    size_t length;
    int32_t id;  // an added token's id, or -1: encode by BPE
  };
  struct Regex;
  struct Cache;  // pre-token -> ids, one per thread
  // This thread's cache, kept across encode() calls (documents share most
  // words); emptied when another tokenizer used it last.
  Cache& thread_cache() const;

  // Appends the pre-tokens of text from pos (a boundary) until one ends at or
  // past stop; returns where the last ends. base is text's offset in the input.
  size_t scan(std::string_view text, size_t base, size_t pos, size_t stop,
              std::vector<Piece>& out) const;
  // All of text's pre-tokens; on large texts, chunks in parallel (the same pieces).
  void pretokenize_into(std::string_view text, size_t base, std::vector<Piece>& out) const;
  std::vector<Piece> split(std::string_view text) const;
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, std::span<const Piece> pieces, Cache& cache,
                     std::vector<int32_t>& out) const;

  std::string what_;
  uint64_t serial_;  // unique per BpeCore: which tokenizer a thread's cache holds
  std::unique_ptr<Regex> regex_;
  std::vector<std::string> id_bytes_;   // id -> the raw bytes it stands for
  std::vector<uint8_t> used_;           // id -> whether it is a token
  BytesToId by_bytes_;                  // the vocabulary's bytes -> id
  std::array<int32_t, 256> byte_id_{};  // byte -> its single-byte token
  MergeMap merges_;
  bool ignore_merges_ = false;
  std::vector<std::pair<std::string, int32_t>> specials_;  // longest first
  std::array<bool, 256> special_first_{};                  // bytes a special starts with
};

}  // namespace kiri::data
