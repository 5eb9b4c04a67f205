#include "kiri/data/bpe_core.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <exception>
#include <queue>

#include "kiri/base/error.h"

namespace kiri::data {

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t next_serial() {
  static std::atomic<uint64_t> serial{0};
  return ++serial;
}

}  // namespace

struct BpeCore::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

BpeCore::BpeCore(const std::string& pattern, std::string what)
    : what_(std::move(what)), serial_(next_serial()), regex_(std::make_unique<Regex>()) {
  byte_id_.fill(-1);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // MATCH_INVALID_UTF: invalid UTF-8 is skipped over instead of failing the match.
  regex_->code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!regex_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    KIRI_RAISE(kData, what_, ": the pre-tokenizer regex does not compile at offset ", offset, ": ",
               reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);  // without JIT it is slower, still right
  // A pattern that matches the empty string would split nothing off.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(regex_->code, nullptr), &pcre2_match_data_free);
  if (md &&
      pcre2_match(regex_->code, reinterpret_cast<PCRE2_SPTR>(""), 0, 0, 0, md.get(), nullptr) >= 0)
    KIRI_RAISE(kData, what_, ": the pre-tokenizer regex matches the empty string");
}

BpeCore::~BpeCore() = default;

void BpeCore::set_token(int32_t id, std::string bytes) {
  KIRI_CHECK_KIND(kInternal, id >= 0, what_, ": negative id ", id);
  if (static_cast<size_t>(id) >= id_bytes_.size()) {
    id_bytes_.resize(id + 1);
    used_.resize(id + 1, 0);
  }
  if (used_[id]) KIRI_RAISE(kData, what_, ": id ", id, " is given to two tokens");
  used_[id] = 1;
  if (bytes.size() == 1) {
    const auto b = static_cast<unsigned char>(bytes[0]);
    if (byte_id_[b] < 0) byte_id_[b] = id;
  }
  by_bytes_.emplace(bytes, id);
  id_bytes_[id] = std::move(bytes);
}

size_t BpeCore::MergeMap::slot(uint64_t key) const {
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
}

const BpeCore::Merge* BpeCore::MergeMap::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  const size_t mask = keys_.size() - 1;
  for (size_t i = slot(key);; i = (i + 1) & mask) {
    if (keys_[i] == key) return &values_[i];
    if (keys_[i] == kEmpty) return nullptr;
  }
}

bool BpeCore::MergeMap::insert(uint64_t key, Merge m, bool replace) {
  if (2 * (size_ + 1) > keys_.size()) {  // at most half full
    std::vector<uint64_t> keys = std::move(keys_);
    std::vector<Merge> values = std::move(values_);
    const size_t capacity = std::max<size_t>(64, 2 * keys.size());
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, Merge{});
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmpty) insert(keys[i], values[i], false);
  }
  const size_t mask = keys_.size() - 1;
  for (size_t i = slot(key);; i = (i + 1) & mask) {
    if (keys_[i] == key) {
      if (replace) values_[i] = m;
      return false;
    }
    if (keys_[i] == kEmpty) {
      keys_[i] = key;
      values_[i] = m;
      ++size_;
      return true;
    }
  }
}

bool BpeCore::add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank, bool replace) {
  return merges_.insert(pair_key(left, right), Merge{rank, merged}, replace);
}

void BpeCore::add_special(std::string bytes, int32_t id) {
  KIRI_CHECK_KIND(kData, !bytes.empty(), what_, ": added token ", id, " is empty");
  KIRI_CHECK_KIND(kInternal, id >= 0, what_, ": negative id ", id);
  if (static_cast<size_t>(id) >= id_bytes_.size()) {
    id_bytes_.resize(id + 1);
    used_.resize(id + 1, 0);
  }
  if (used_[id] && id_bytes_[id] != bytes)
    KIRI_RAISE(kData, what_, ": added token '", bytes, "' has id ", id,
               ", which the vocabulary gives to '", id_bytes_[id], "'");
  for (const auto& [s, other] : specials_)
    if (s == bytes) {
      if (other != id)
        KIRI_RAISE(kData, what_, ": added token '", bytes, "' has two ids, ", other, " and ", id);
      return;
    }
  used_[id] = 1;
  id_bytes_[id] = bytes;
  special_first_[static_cast<unsigned char>(bytes[0])] = true;
  specials_.emplace_back(std::move(bytes), id);
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void BpeCore::finish() {
  for (int b = 0; b < 256; ++b)
    if (byte_id_[b] < 0) KIRI_RAISE(kData, what_, " has no token for byte ", b);
}

int32_t BpeCore::find(std::string_view bytes) const {
  const auto it = by_bytes_.find(bytes);
  if (it != by_bytes_.end()) return it->second;
  for (const auto& [s, id] : specials_)
    if (s == bytes) return id;
  return -1;
}

size_t BpeCore::scan(std::string_view text, size_t base, size_t pos, size_t stop,
                     std::vector<Piece>& out) const {
  thread_local std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      nullptr, &pcre2_match_data_free);
  // Match data sized for the largest pattern seen on this thread (ovector of 64 pairs).
  if (!md) md.reset(pcre2_match_data_create(64, nullptr));
  if (!md) KIRI_RAISE(kOutOfMemory, "cannot allocate PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (pos < stop) {
    const int rc = pcre2_match(regex_->code, subject, text.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // only invalid UTF-8 is left
      out.push_back({base + pos, text.size() - pos, -1});
      return text.size();
    }
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      KIRI_RAISE(kData, what_, " pre-tokenization failed at byte ", base + pos, ": ",
                 reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    if (ov[1] <= ov[0])  // a pattern that matches the empty string would loop forever
      KIRI_RAISE(kData, what_, ": the pre-tokenizer regex matches the empty string at byte ",
                 base + ov[0]);
    if (ov[0] > pos) out.push_back({base + pos, ov[0] - pos, -1});  // what the regex skipped
    out.push_back({base + ov[0], ov[1] - ov[0], -1});
    pos = ov[1];
  }
  return pos;
}

void BpeCore::pretokenize_into(std::string_view text, size_t base, std::vector<Piece>& out) const {
  constexpr size_t kParallelBytes = size_t{1} << 18;
  const int chunks = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (chunks < 2 || text.size() < kParallelBytes) {
    scan(text, base, 0, text.size(), out);
    return;
  }
  // Each thread pre-tokenizes from its own start (an ASCII byte, so never inside
  // a character), matching on the whole text so lookarounds see past its end.
  // A chunk's pieces are the serial ones from the first place where the serial
  // run also has a piece boundary: matching from a position does not depend on
  // how it was reached. Where the previous chunk ran past a chunk's start, the
  // serial run is continued until it meets one of that chunk's boundaries.
  std::vector<size_t> start(chunks + 1, text.size());
  for (int c = 0; c < chunks; ++c) {
    size_t p = text.size() * c / chunks;
    while (p < text.size() && static_cast<unsigned char>(text[p]) >= 0x80) ++p;
    start[c] = std::max(p, c ? start[c - 1] : 0);
  }
  std::vector<std::vector<Piece>> part(chunks);
  std::vector<size_t> end(chunks);
  std::vector<std::exception_ptr> error(chunks);
#pragma omp parallel for schedule(static, 1) num_threads(chunks)
  for (int c = 0; c < chunks; ++c) {
    try {
      part[c].reserve((start[c + 1] - start[c]) / 4 + 1);
      end[c] = scan(text, base, start[c], start[c + 1], part[c]);
    } catch (...) {
      error[c] = std::current_exception();
    }
  }
  for (auto& e : error)
    if (e) std::rethrow_exception(e);
  size_t at = 0;  // where the serial run has got to
  for (int c = 0; c < chunks; ++c) {
    const auto& ps = part[c];
    while (at < end[c]) {
      const auto it = std::lower_bound(ps.begin(), ps.end(), base + at,
                                       [](const Piece& p, size_t off) { return p.offset < off; });
      if (it != ps.end() && it->offset == base + at) {  // in step: the rest of the chunk is right
        out.insert(out.end(), it, ps.end());
        at = end[c];
        break;
      }
      at = scan(text, base, at, at + 1, out);  // one more serial piece
    }
  }
}

std::vector<BpeCore::Piece> BpeCore::split(std::string_view text) const {
  std::vector<Piece> pieces;
  pieces.reserve(text.size() / 4 + 1);
  size_t start = 0;  // of the text not yet pre-tokenized
  for (size_t i = 0; i < text.size() && !specials_.empty(); ++i) {
    if (!special_first_[static_cast<unsigned char>(text[i])]) continue;
    // The longest added token that starts here (specials_ is longest first).
    const auto it = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) {
      return text.compare(i, s.first.size(), s.first) == 0;
    });
    if (it == specials_.end()) continue;
    if (i > start) pretokenize_into(text.substr(start, i - start), start, pieces);
    pieces.push_back({i, it->first.size(), it->second});
    i += it->first.size() - 1;
    start = i + 1;
  }
  if (start < text.size()) pretokenize_into(text.substr(start), start, pieces);
  return pieces;
}

std::vector<std::pair<size_t, size_t>> BpeCore::pretokenize(std::string_view text) const {
  std::vector<Piece> pieces;
  pretokenize_into(text, 0, pieces);
  std::vector<std::pair<size_t, size_t>> spans;
  spans.reserve(pieces.size());
  for (const auto& p : pieces) spans.emplace_back(p.offset, p.length);
  return spans;
}

void BpeCore::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a linked list over byte positions; a heap holds candidate
  // merges ordered by (rank, position): Hugging Face's merge order. When every
  // merge uses tokens that lower-rank merges made (GPT-2's files, checked at
  // load), it is also encoder.py's "merge every occurrence of the best pair,
  // left to right", in O(n log n) instead of O(n^2).
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
    if (const Merge* m = merges_.find(pair_key(id[p], id[next[p]])))
      heap.push({m->rank, p, id[p], id[next[p]], m->id});
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

struct BpeCore::Cache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
};

BpeCore::Cache& BpeCore::thread_cache() const {
  thread_local Cache cache;
  if (cache.owner != serial_) {
    cache.ids.clear();
    cache.owner = serial_;
  }
  return cache;
}

void BpeCore::encode_pieces(std::string_view text, std::span<const Piece> pieces, Cache& cache,
                            std::vector<int32_t>& out) const {
  constexpr size_t kMaxCached = 1 << 18;  // bounds memory (it outlives the call) on varied inputs
  for (const Piece& p : pieces) {
    if (p.id >= 0) {
      out.push_back(p.id);
      continue;
    }
    const std::string_view piece = text.substr(p.offset, p.length);
    if (p.length == 1) {
      out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (ignore_merges_) {
      const auto whole = by_bytes_.find(piece);
      if (whole != by_bytes_.end()) {
        out.push_back(whole->second);
        continue;
      }
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

std::vector<int32_t> BpeCore::encode(std::string_view text) const {
  const auto pieces = split(text);
  // Blocks of pieces are encoded in parallel and joined in order.
  constexpr size_t kBlock = 8192;
  const auto blocks = static_cast<int64_t>((pieces.size() + kBlock - 1) / kBlock);
  std::vector<std::vector<int32_t>> outs(blocks);
#pragma omp parallel if (blocks > 1)
  {
    Cache& cache = thread_cache();
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

std::string BpeCore::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      KIRI_RAISE(kInvalidArgument, what_, " tokenizer: id ", ids[i], " at position ", i,
                 " is outside [0, ", vocab_size(), ")");
    if (!used_[ids[i]])
      KIRI_RAISE(kInvalidArgument, what_, " tokenizer: id ", ids[i], " at position ", i,
                 " is no token (the vocabulary skips it)");
    text += id_bytes_[ids[i]];
  }
  return text;
}

}  // namespace kiri::data
