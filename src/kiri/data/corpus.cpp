#include "kiri/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/data/io.h"
#include "kiri/data/shard.h"

namespace kiri::data {

namespace fs = std::filesystem;

namespace {

constexpr int kManifestFormat = 1;
// 4 GiB of text: about 20 GiB in memory while it is tokenized (docs/data.md).
constexpr uint64_t kMaxCorpusBytes = uint64_t{4} << 30;

// What a set of shards was made from; ensure_prepared compares it.
nlohmann::json describe(const std::string& text_path, const Tokenizer& tokenizer,
                        double val_fraction) {
  std::error_code ec;
  const auto bytes = fs::file_size(text_path, ec);
  return {{"format", kManifestFormat},
          {"text", fs::absolute(text_path).lexically_normal().string()},
          {"text_bytes", ec ? 0 : bytes},
          {"tokenizer", tokenizer.name()},
          {"vocab_size", tokenizer.vocab_size()},
          {"val_fraction", val_fraction}};
}

PreparedCorpus paths_in(const std::string& out_dir) {
  PreparedCorpus c;
  c.train_path = (fs::path(out_dir) / "train.bin").string();
  c.val_path = (fs::path(out_dir) / "val.bin").string();
  return c;
}

std::string manifest_path(const std::string& out_dir) {
  return (fs::path(out_dir) / "corpus.json").string();
}

// Returns why the shards in out_dir cannot be reused, or "" when they can
// (then fills the counts into c).
std::string stale_reason(const std::string& text_path, const nlohmann::json& want,
                         const std::string& out_dir, PreparedCorpus& c) {
  const std::string manifest = manifest_path(out_dir);
  if (!fs::exists(manifest)) return manifest + " does not exist";
  nlohmann::json have = nlohmann::json::parse(read_file(manifest, "corpus manifest"), nullptr,
                                              /*allow_exceptions=*/false);
  if (have.is_discarded() || !have.is_object()) return manifest + " is not a JSON object";
  for (const auto& [key, value] : want.items())
    if (!have.contains(key) || have[key] != value)
      return str(manifest, ": ", key, " was ", have.value(key, nlohmann::json()).dump(), ", now ",
                 value.dump());
  const auto text_time = fs::last_write_time(text_path);
  for (const std::string* path : {&c.train_path, &c.val_path}) {
    if (!fs::exists(*path)) return *path + " does not exist";
    if (fs::last_write_time(*path) < text_time) return *path + " is older than " + text_path;
    const ShardHeader h = read_shard_header(*path);  // raises on a damaged header
    if (h.tokenizer != want["tokenizer"] || h.vocab_size != want["vocab_size"])
      return str(*path, " holds tokenizer ", h.tokenizer, " with vocab ", h.vocab_size);
    (path == &c.train_path ? c.train_tokens : c.val_tokens) = h.token_count;
  }
  if (have.value("train_tokens", uint64_t{0}) != c.train_tokens ||
      have.value("val_tokens", uint64_t{0}) != c.val_tokens)
    return str("shard token counts ", c.train_tokens, "/", c.val_tokens, " differ from ", manifest);
  return "";
}

}  // namespace

uint64_t val_token_count(uint64_t n, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  KIRI_CHECK(n >= 2, "cannot split ", n, " tokens into train and validation (need at least 2)");
  const auto v = static_cast<uint64_t>(std::llround(static_cast<double>(n) * val_fraction));
  return std::clamp<uint64_t>(v, 1, n - 1);
}

PreparedCorpus prepare_corpus(const std::string& text_path, const Tokenizer& tokenizer,
                              const std::string& out_dir, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  // read_small_file refuses a FIFO or device (open() would block on it) and caps the size:
  // the text, its tokens and the shards are all held in memory while preparing.
  std::string text;
  try {
    text = read_small_file(text_path, kMaxCorpusBytes, ErrorKind::kData, "corpus text");
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kData) throw;
    KIRI_RAISE(kData, e.message());  // a missing or unreadable text is bad data
  }
  if (text.empty()) KIRI_RAISE(kData, "corpus text ", text_path, " is empty");
  Timer timer;
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  if (tokens.size() < 2)
    KIRI_RAISE(kData, "corpus text ", text_path, " encodes to ", tokens.size(),
               " tokens; a train/val split needs at least 2");
  const uint64_t n_val = val_token_count(tokens.size(), val_fraction);
  const uint64_t n_train = tokens.size() - n_val;

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) KIRI_RAISE(kIo, "cannot create ", out_dir, ": ", ec.message());
  PreparedCorpus c = paths_in(out_dir);
  const auto vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  const std::span<const int32_t> all(tokens);
  // The manifest goes last: without it, a half-written set is never reused.
  std::filesystem::remove(manifest_path(out_dir), ec);
  write_shard(c.train_path, tokenizer.name(), vocab, all.first(n_train));
  write_shard(c.val_path, tokenizer.name(), vocab, all.subspan(n_train));
  nlohmann::json manifest = describe(text_path, tokenizer, val_fraction);
  manifest["train_tokens"] = n_train;
  manifest["val_tokens"] = n_val;
  write_file_atomic(manifest_path(out_dir), {manifest.dump(2) + "\n"});
  c.train_tokens = n_train;
  c.val_tokens = n_val;
  log::info("data: ", text_path, " (", text.size(), " bytes) -> ", n_train, " train + ", n_val,
            " val ", tokenizer.name(), " tokens in ", out_dir, " (", timer.seconds(), " s)");
  return c;
}

PreparedCorpus ensure_prepared(const std::string& text_path, const Tokenizer& tokenizer,
                               const std::string& out_dir, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  if (!fs::is_regular_file(text_path))
    KIRI_RAISE(kData, "corpus text ", text_path, " does not exist or is not a regular file");
  PreparedCorpus c = paths_in(out_dir);
  std::string reason;
  try {
    reason = stale_reason(text_path, describe(text_path, tokenizer, val_fraction), out_dir, c);
  } catch (const std::exception& e) {  // a damaged shard or manifest: make them again
    reason = e.what();
  }
  if (reason.empty()) {
    c.reused = true;
    log::info("data: reusing ", c.train_tokens, " train + ", c.val_tokens, " val tokens in ",
              out_dir);
    return c;
  }
  log::info("data: preparing ", out_dir, " (", reason, ")");
  return prepare_corpus(text_path, tokenizer, out_dir, val_fraction);
}

}  // namespace kiri::data
