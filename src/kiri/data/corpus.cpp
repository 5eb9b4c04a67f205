#include "kiri/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/log.h"
#include "kiri/base/timer.h"
#include "kiri/data/io.h"
#include "kiri/data/sft.h"
#include "kiri/data/shard.h"
#include "kiri/data/staged_dir.h"

namespace kiri::data {

namespace fs = std::filesystem;

namespace {

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

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

PreparedCorpus paths_in(const std::string& out_dir) {
  PreparedCorpus c;
  c.train_path = (fs::path(out_dir) / "train.bin").string();
  c.val_path = (fs::path(out_dir) / "val.bin").string();
  return c;
}

std::string manifest_path(const std::string& out_dir) {
  return (fs::path(out_dir) / kManifestName).string();
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
  c.documents = have.value("documents", uint64_t{0});
  if (have.value("train_tokens", uint64_t{0}) != c.train_tokens ||
      have.value("val_tokens", uint64_t{0}) != c.val_tokens)
    return str("shard token counts ", c.train_tokens, "/", c.val_tokens, " differ from ", manifest);
  return "";
}

// The folder beside the shards that holds a copy of a Hugging Face tokenizer's files.
constexpr const char* kTokenizerFilesName = "tokenizer";

// What a rewrite of an output folder replaces: the shards, the manifest and the
// temporary files of an older kiri's interrupted writes (`.train.bin.tmp.PID.N`).
bool is_corpus_entry(const std::string& name) {
  for (const char* own : {"train.bin", "val.bin", "train.mask.bin", "val.mask.bin", kManifestName,
                          kTokenizerFilesName})
    if (name == own || name.rfind(str(".", own, ".tmp"), 0) == 0) return true;
  return name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
}

// A Hugging Face tokenizer's files, copied into dir/tokenizer so that the shards name a
// tokenizer that loads without the path they were made with (data.tokenizer may then be
// left out). "byte" and "gpt2" need no copy: their names load them. Returns whether it copied.
bool copy_tokenizer_files(const Tokenizer& tokenizer, const std::string& dir) {
  const std::string name = tokenizer.name();
  if (name == "byte" || name == "gpt2" || tokenizer.files().empty()) return false;
  const fs::path out = fs::path(dir) / kTokenizerFilesName;
  fs::create_directories(out);
  for (const TokenizerFile& f : tokenizer.files()) {
    KIRI_CHECK_KIND(kData, f.hf_name.find('/') == std::string::npos, "tokenizer file name '",
                    f.hf_name, "' is not a plain name");
    std::error_code ec;
    fs::copy_file(f.path, out / f.hf_name, fs::copy_options::overwrite_existing, ec);
    KIRI_CHECK_KIND(kIo, !ec, "cannot copy the tokenizer file ", f.path, " to ",
                    (out / f.hf_name).string(), ": ", ec.message());
  }
  return true;
}

// Writes the first n_train tokens to dir/train.bin and the rest to dir/val.bin (with a
// mask: its halves to train.mask.bin and val.mask.bin); returns the manifest's shard list.
nlohmann::json write_split_shards(const std::string& dir, const Tokenizer& tokenizer,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<uint8_t>& mask, uint64_t n_train) {
  const PreparedCorpus s = paths_in(dir);
  const auto vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  const std::span<const int32_t> all(tokens);
  write_shard(s.train_path, tokenizer.name(), vocab, all.first(n_train));
  data_fault_point(2);
  write_shard(s.val_path, tokenizer.name(), vocab, all.subspan(n_train));
  data_fault_point(3);
  const std::vector<int32_t> mask32(mask.begin(), mask.end());
  nlohmann::json shards = nlohmann::json::array();
  for (const std::string* path : {&s.train_path, &s.val_path}) {
    const bool train = path == &s.train_path;
    const ShardHeader h = read_shard_header(*path);
    shards.push_back({{"file", fs::path(*path).filename().string()},
                      {"split", train ? "train" : "val"},
                      {"tokens", h.token_count},
                      {"fnv1a64", hex64(h.checksum)}});
    if (mask.empty()) continue;
    const std::string name = train ? "train.mask.bin" : "val.mask.bin";
    const std::span<const int32_t> m(mask32);
    write_shard((fs::path(dir) / name).string(), kLossMaskName, kLossMaskVocab,
                train ? m.first(n_train) : m.subspan(n_train));
    const ShardHeader mh = read_shard_header((fs::path(dir) / name).string());
    uint64_t counted = 0;
    for (uint64_t i = train ? 0 : n_train; i < (train ? n_train : mask.size()); ++i)
      counted += mask[i];
    shards.back()["loss_mask"] = {
        {"file", name}, {"fnv1a64", hex64(mh.checksum)}, {"counted_tokens", counted}};
  }
  return shards;
}

// Encodes the files and writes the shards and, last, the manifest (base's keys
// plus the counts, checksums and sources) into a staged folder beside out_dir,
// then swaps it into place: out_dir holds the old corpus or the new one, never
// a mix, whenever the process dies.
PreparedCorpus build_with(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                          const std::string& out_dir, double val_fraction,
                          const DocumentOptions& opts, nlohmann::json manifest) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  if (files.empty()) KIRI_RAISE(kData, "no input files for ", out_dir);
  Timer timer;
  StagedDir staged(out_dir, is_corpus_entry);  // removed again if anything below fails
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;  // fine-tuning formats: 1 where the loss is taken
  uint64_t documents = 0, bytes = 0;
  nlohmann::json sources = nlohmann::json::array();
  for (const std::string& f : files) {
    const SourceInfo s = is_sft_format(opts.format)
                             ? append_sft_documents(f, tokenizer, opts, tokens, mask, documents)
                             : append_documents(f, tokenizer, opts, tokens, documents);
    bytes += s.bytes;
    sources.push_back({{"path", s.path},
                       {"bytes", s.bytes},
                       {"format", s.format},
                       {"documents", s.documents},
                       {"tokens", s.tokens}});
  }
  const std::string what = files.size() == 1 ? files[0] : str(files.size(), " input files");
  if (tokens.empty()) KIRI_RAISE(kData, "corpus ", what, " is empty: it holds no tokens");
  if (tokens.size() < 2)
    KIRI_RAISE(kData, "corpus ", what, " encodes to ", tokens.size(),
               " tokens; a train/val split needs at least 2");
  const uint64_t n_val = val_token_count(tokens.size(), val_fraction);
  const uint64_t n_train = tokens.size() - n_val;

  nlohmann::json shards = write_split_shards(staged.path(), tokenizer, tokens, mask, n_train);
  if (copy_tokenizer_files(tokenizer, staged.path()))
    manifest["tokenizer_files"] = kTokenizerFilesName;
  manifest["eot_token"] = tokenizer.eot_token();
  manifest["documents"] = documents;
  manifest["train_tokens"] = n_train;
  manifest["val_tokens"] = n_val;
  manifest["shards"] = std::move(shards);
  manifest["sources"] = std::move(sources);
  write_file_atomic(manifest_path(staged.path()), {manifest.dump(2) + "\n"});
  data_fault_point(4);
  staged.commit();
  PreparedCorpus c = paths_in(out_dir);
  c.train_tokens = n_train;
  c.val_tokens = n_val;
  c.documents = documents;
  log::info("data: ", what, " (", bytes, " bytes, ", documents, " documents) -> ", n_train,
            " train + ", n_val, " val ", tokenizer.name(), " tokens in ", out_dir, " (",
            timer.seconds(), " s)");
  return c;
}

}  // namespace

uint64_t val_token_count(uint64_t n, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  KIRI_CHECK(n >= 2, "cannot split ", n, " tokens into train and validation (need at least 2)");
  const auto v = static_cast<uint64_t>(std::llround(static_cast<double>(n) * val_fraction));
  return std::clamp<uint64_t>(v, 1, n - 1);
}

PreparedCorpus build_corpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                            const std::string& out_dir, double val_fraction,
                            const DocumentOptions& opts) {
  nlohmann::json manifest = {{"format", kManifestFormat},
                             {"tokenizer", tokenizer.name()},
                             {"vocab_size", tokenizer.vocab_size()},
                             {"val_fraction", val_fraction}};
  // An earlier run's shards inside an input folder are not inputs: a second run of
  // `kiri data docs --out docs/shards` would read them as tokens and double the corpus.
  std::error_code ec;
  if (out_dir.empty()) KIRI_RAISE(kData, "the output folder is an empty path");
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
    KIRI_RAISE(kData, "output folder ", out_dir, " exists and is not a folder");
  const fs::path out = fs::weakly_canonical(fs::absolute(out_dir, ec), ec);
  if (ec)
    KIRI_RAISE(kData, "cannot resolve the output folder ", out_dir, ": ", ec.message(),
               " (a symlink loop, or a path through a file)");
  std::vector<std::string> inputs;
  for (const std::string& f : files) {
    fs::path p = fs::weakly_canonical(fs::absolute(f), ec);
    if (ec) p = fs::absolute(f);
    const auto [o, q] = std::mismatch(out.begin(), out.end(), p.begin(), p.end());
    if (o == out.end())
      log::info("data: skipping ", f, ", which is inside the output folder ", out_dir);
    else
      inputs.push_back(f);
  }
  return build_with(inputs, tokenizer, out_dir, val_fraction, opts, std::move(manifest));
}

PreparedCorpus prepare_corpus(const std::string& text_path, const Tokenizer& tokenizer,
                              const std::string& out_dir, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  std::error_code ec;
  if (!fs::exists(text_path, ec)) KIRI_RAISE(kData, "corpus text ", text_path, " does not exist");
  if (fs::is_regular_file(text_path, ec) && fs::file_size(text_path, ec) == 0)
    KIRI_RAISE(kData, "corpus text ", text_path, " is empty");
  // A corpus file is text (JSON Lines by its extension), never tokens: shards are data.dir's.
  DocumentOptions opts;
  const std::string ext = fs::path(text_path).extension().string();
  opts.format = ext == ".jsonl" || ext == ".ndjson" ? InputFormat::kJsonl : InputFormat::kText;
  return build_with({text_path}, tokenizer, out_dir, val_fraction, opts,
                    describe(text_path, tokenizer, val_fraction));
}

PreparedCorpus ensure_prepared(const std::string& text_path, const Tokenizer& tokenizer,
                               const std::string& out_dir, double val_fraction) {
  KIRI_CHECK(val_fraction > 0.0 && val_fraction < 1.0, "val_fraction ", val_fraction,
             " must lie strictly between 0 and 1");
  if (fs::is_directory(text_path))
    KIRI_RAISE(kData, "corpus text ", text_path,
               " is a folder: train on the shards in it with data.dir=", text_path,
               ", or make shards of its files with `kiri data ", text_path, " --out DIR`");
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
