#include "kiri/data/gpt2_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>

#include "kiri/base/error.h"
#include "kiri/data/io.h"

namespace kiri::data {

namespace {

// GPT-2's pre-tokenization regex, verbatim from encoder.py.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {  // bytes_to_unicode never goes past U+0143
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Decodes a key of encoder.json (UTF-8 over the bytes_to_unicode alphabet)
// back to raw bytes. Returns false on anything outside that alphabet.
bool unicode_to_bytes(std::string_view key, const std::array<int, 512>& byte_of, std::string& out) {
  out.clear();
  for (size_t i = 0; i < key.size();) {
    const auto b0 = static_cast<unsigned char>(key[i]);
    char32_t c;
    if (b0 < 0x80) {
      c = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < key.size()) {
      c = ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(key[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;
    }
    if (c >= byte_of.size() || byte_of[c] < 0) return false;
    out += static_cast<char>(byte_of[c]);
  }
  return true;
}

// Hash for string_view lookups into a map keyed by std::string (no copy per lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

std::array<char32_t, 256> gpt2_bytes_to_unicode() {
  // Printable Latin-1 bytes map to themselves; the rest to U+0100 onwards, in order.
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

struct Gpt2Tokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path,
                             const std::string& vocab_bpe_path)
    : regex_(std::make_unique<Regex>()),
      encoder_json_path_(encoder_json_path),
      vocab_bpe_path_(vocab_bpe_path) {
  std::unordered_map<std::string, int32_t> by_unicode;
  load_encoder(encoder_json_path, by_unicode);
  load_merges(vocab_bpe_path, by_unicode);

  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is skipped over instead of failing the match.
  regex_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!regex_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    KIRI_RAISE(kInternal, "gpt2 regex does not compile at offset ", offset, ": ",
               reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);  // without JIT it is slower, still right
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

void Gpt2Tokenizer::load_encoder(const std::string& path,
                                 std::unordered_map<std::string, int32_t>& by_unicode) {
  const std::string text = read_file(path, "gpt2 encoder");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KIRI_RAISE(kData, "gpt2 encoder ", path, " is not valid JSON: ", e.what());
  }
  if (!json.is_object() || json.empty())
    KIRI_RAISE(kData, "gpt2 encoder ", path, " is not a non-empty JSON object of token -> id");
  const auto unicode = gpt2_bytes_to_unicode();
  std::array<int, 512> byte_of;
  byte_of.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of[unicode[b]] = b;

  id_bytes_.assign(json.size(), std::string());
  std::vector<bool> seen(json.size(), false);
  std::string bytes;
  for (const auto& [key, value] : json.items()) {
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(json.size()) || seen[id])
      KIRI_RAISE(kData, "gpt2 encoder ", path, ": token '", key, "' has id ", value.dump(),
                 "; ids must be distinct integers in [0, ", json.size(), ")");
    if (!unicode_to_bytes(key, byte_of, bytes))
      KIRI_RAISE(kData, "gpt2 encoder ", path, ": token '", key, "' (id ", id,
                 ") is not in GPT-2's byte alphabet");
    seen[id] = true;
    id_bytes_[id] = bytes;
    by_unicode.emplace(key, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(key, unicode[b]);
    const auto it = by_unicode.find(key);
    if (it == by_unicode.end())
      KIRI_RAISE(kData, "gpt2 encoder ", path, " has no token for byte ", b);
    byte_id_[b] = it->second;
  }
  const auto eot = by_unicode.find("<|endoftext|>");
  eot_ = eot == by_unicode.end() ? -1 : eot->second;
}

void Gpt2Tokenizer::load_merges(const std::string& path,
                                const std::unordered_map<std::string, int32_t>& by_unicode) {
  const std::string text = read_file(path, "gpt2 merges");
  // The rank of the merge that first produced each token (-1: a single byte).
  std::vector<int64_t> made_at(id_bytes_.size(), INT64_MAX);
  for (int b = 0; b < 256; ++b) made_at[byte_id_[b]] = -1;
  auto lookup = [&](const std::string& token, size_t line) {
    const auto it = by_unicode.find(token);
    if (it == by_unicode.end())
      KIRI_RAISE(kData, "gpt2 merges ", path, " line ", line, ": token '", token,
                 "' is not in the encoder");
    return it->second;
  };
  size_t line_no = 0;
  uint32_t rank = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      KIRI_RAISE(kData, "gpt2 merges ", path, " line ", line_no, ": '", line,
                 "' is not two tokens separated by one space");
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    const int32_t l = lookup(left, line_no), r = lookup(right, line_no);
    const int32_t merged = lookup(left + right, line_no);
    // Encoding merges the lowest rank first; that is only GPT-2's order when
    // every merge uses tokens that earlier merges produced.
    if (made_at[l] >= rank || made_at[r] >= rank)
      KIRI_RAISE(kData, "gpt2 merges ", path, " line ", line_no, ": '", line,
                 "' uses a token that no earlier merge produces");
    if (!merges_.emplace(pair_key(l, r), Merge{rank, merged}).second)
      KIRI_RAISE(kData, "gpt2 merges ", path, " line ", line_no, ": '", line, "' is repeated");
    made_at[merged] = std::min<int64_t>(made_at[merged], rank);
    ++rank;
  }
  if (merges_.empty()) KIRI_RAISE(kData, "gpt2 merges ", path, " holds no merges");
}

std::vector<std::pair<size_t, size_t>> Gpt2Tokenizer::pretokenize(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  pieces.reserve(text.size() / 4 + 1);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(regex_->code, nullptr), &pcre2_match_data_free);
  if (!md) KIRI_RAISE(kOutOfMemory, "cannot allocate PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(regex_->code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid UTF-8 is left
      pieces.emplace_back(pos, text.size() - pos);
      break;
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      KIRI_RAISE(kData, "gpt2 pre-tokenization failed at byte ", pos, " of ", text.size(), ": ",
                 reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    // Every alternative consumes at least one character.
    KIRI_CHECK_KIND(kInternal, ov[1] > ov[0], "empty gpt2 pre-token at byte ", ov[0]);
    if (ov[0] > pos) pieces.emplace_back(pos, ov[0] - pos);  // invalid UTF-8 the regex skipped
    pieces.emplace_back(ov[0], ov[1] - ov[0]);
    pos = ov[1];
  }
  return pieces;
}

void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list over byte positions; a heap holds candidate
  // merges ordered by (rank, position). Since merges only use tokens made by
  // lower-rank merges, this is encoder.py's "merge every occurrence of the
  // best pair, left to right" in O(n log n) instead of O(n^2).
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> id(n), prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    uint32_t rank;
    int32_t pos, left, right, merged;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  auto consider = [&](int32_t p) {
    if (p < 0 || next[p] < 0) return;
    const auto it = merges_.find(pair_key(id[p], id[next[p]]));
    if (it != merges_.end()) heap.push({it->second.rank, p, id[p], id[next[p]], it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t q = next[c.pos];
    if (id[c.pos] != c.left || q < 0 || id[q] != c.right) continue;  // stale
    id[c.pos] = c.merged;
    id[q] = -1;
    next[c.pos] = next[q];
    if (next[q] >= 0) prev[next[q]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  for (int32_t p = 0; p >= 0; p = next[p]) out.push_back(id[p]);
}

struct Gpt2Tokenizer::Cache {
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
};

void Gpt2Tokenizer::encode_pieces(std::string_view text,
                                  std::span<const std::pair<size_t, size_t>> pieces, Cache& cache,
                                  std::vector<int32_t>& out) const {
  constexpr size_t kMaxCached = 1 << 20;  // bounds memory on huge, varied inputs
  for (const auto& [offset, length] : pieces) {
    const std::string_view piece = text.substr(offset, length);
    if (length == 1) {
      out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    const auto it = cache.ids.find(piece);
    if (it != cache.ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    const size_t first = out.size();
    bpe(piece, out);
    if (cache.ids.size() >= kMaxCached) cache.ids.clear();
    cache.ids.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  const auto pieces = pretokenize(text);
  // Blocks of pieces are encoded in parallel and joined in order.
  constexpr size_t kBlock = 8192;
  const auto blocks = static_cast<int64_t>((pieces.size() + kBlock - 1) / kBlock);
  std::vector<std::vector<int32_t>> outs(blocks);
#pragma omp parallel if (blocks > 1)
  {
    Cache cache;
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t begin = static_cast<size_t>(b) * kBlock;
      const size_t count = std::min(kBlock, pieces.size() - begin);
      outs[b].reserve(count * 2);
      encode_pieces(text, std::span(pieces).subspan(begin, count), cache, outs[b]);
    }
  }
  size_t total = 0;
  for (const auto& o : outs) total += o.size();
  std::vector<int32_t> ids;
  ids.reserve(total);
  for (const auto& o : outs) ids.insert(ids.end(), o.begin(), o.end());
  return ids;
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      KIRI_RAISE(kInvalidArgument, "gpt2 tokenizer: id ", ids[i], " at position ", i,
                 " is outside [0, ", vocab_size(), ")");
    text += id_bytes_[ids[i]];
  }
  return text;
}

}  // namespace kiri::data
