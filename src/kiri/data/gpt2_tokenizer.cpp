#include "kiri/data/gpt2_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/data/io.h"

namespace kiri::data {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

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

const std::array<int, 512>& byte_of_code_point() {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t;
    t.fill(-1);
    const auto unicode = gpt2_bytes_to_unicode();
    for (int b = 0; b < 256; ++b) t[unicode[b]] = b;
    return t;
  }();
  return table;
}

void load_encoder(BpeCore& core, const std::string& path, std::string_view label,
                  BytesToId& by_unicode) {
  const std::string text = read_file(path, std::string(label) + " encoder");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    KIRI_RAISE(kData, label, " encoder ", path, " is not valid JSON: ", e.what());
  }
  if (!json.is_object() || json.empty())
    KIRI_RAISE(kData, label, " encoder ", path, " is not a non-empty JSON object of token -> id");
  std::vector<bool> seen(json.size(), false);
  std::string bytes;
  for (const auto& [key, value] : json.items()) {
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    if (id < 0 || id >= static_cast<int64_t>(json.size()) || seen[id])
      KIRI_RAISE(kData, label, " encoder ", path, ": token '", key, "' has id ", value.dump(),
                 "; ids must be distinct integers in [0, ", json.size(), ")");
    if (!gpt2_unicode_to_bytes(key, bytes))
      KIRI_RAISE(kData, label, " encoder ", path, ": token '", key, "' (id ", id,
                 ") is not in GPT-2's byte alphabet");
    seen[id] = true;
    core.set_token(static_cast<int32_t>(id), bytes);
    by_unicode.emplace(key, static_cast<int32_t>(id));
  }
  const auto unicode = gpt2_bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(key, unicode[b]);
    if (by_unicode.find(key) == by_unicode.end())
      KIRI_RAISE(kData, label, " encoder ", path, " has no token for byte ", b);
  }
}

void load_merges(BpeCore& core, const std::string& path, std::string_view label,
                 const BytesToId& by_unicode) {
  const std::string text = read_file(path, std::string(label) + " merges");
  // The rank of the merge that first produced each token (-1: a single byte).
  std::vector<int64_t> made_at(core.vocab_size(), INT64_MAX);
  for (int b = 0; b < 256; ++b) made_at[core.byte_token(b)] = -1;
  auto lookup = [&](const std::string& token, size_t line) {
    const auto it = by_unicode.find(token);
    if (it == by_unicode.end())
      KIRI_RAISE(kData, label, " merges ", path, " line ", line, ": token '", token,
                 "' is not in the encoder");
    return it->second;
  };
  size_t line_no = 0;
  uint32_t rank = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.ends_with('\r')) line.remove_suffix(1);  // a merges.txt saved on Windows
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      KIRI_RAISE(kData, label, " merges ", path, " line ", line_no, ": '", line,
                 "' is not two tokens separated by one space");
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    const int32_t l = lookup(left, line_no), r = lookup(right, line_no);
    const int32_t merged = lookup(left + right, line_no);
    // Encoding merges the lowest rank first; that is only GPT-2's order when
    // every merge uses tokens that earlier merges produced.
    if (made_at[l] >= rank || made_at[r] >= rank)
      KIRI_RAISE(kData, label, " merges ", path, " line ", line_no, ": '", line,
                 "' uses a token that no earlier merge produces");
    if (!core.add_merge(l, r, merged, rank))
      KIRI_RAISE(kData, label, " merges ", path, " line ", line_no, ": '", line, "' is repeated");
    made_at[merged] = std::min<int64_t>(made_at[merged], rank);
    ++rank;
  }
  if (rank == 0) KIRI_RAISE(kData, label, " merges ", path, " holds no merges");
}

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

bool gpt2_unicode_to_bytes(std::string_view key, std::string& out) {
  const auto& byte_of = byte_of_code_point();
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

void load_gpt2_files(BpeCore& core, const std::string& encoder_json_path,
                     const std::string& vocab_bpe_path, std::string_view label) {
  BytesToId by_unicode;
  load_encoder(core, encoder_json_path, label, by_unicode);
  core.finish();
  load_merges(core, vocab_bpe_path, label, by_unicode);
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path,
                             const std::string& vocab_bpe_path)
    : core_(kGpt2Pattern, "gpt2"),
      encoder_json_path_(encoder_json_path),
      vocab_bpe_path_(vocab_bpe_path) {
  load_gpt2_files(core_, encoder_json_path, vocab_bpe_path, "gpt2");
  eot_ = core_.find("<|endoftext|>");
}

Gpt2Tokenizer::~Gpt2Tokenizer() = default;

}  // namespace kiri::data
