#include "kiri/data/dataset.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/corpus.h"
#include "kiri/data/sft.h"

namespace kiri::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxManifestBytes = uint64_t{16} << 20;

json read_manifest(const std::string& path) {
  const std::string text =
      read_small_file(path, kMaxManifestBytes, ErrorKind::kData, "corpus manifest");
  if (json_nesting_depth(text, 65) > 64)
    KIRI_RAISE(kData, "corpus manifest ", path, " nests deeper than 64 levels");
  const json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object())
    KIRI_RAISE(kData, "corpus manifest ", path, " is not a JSON object");
  if (!m.contains("tokenizer") || !m["tokenizer"].is_string())
    KIRI_RAISE(kData, "corpus manifest ", path, " names no tokenizer");
  return m;
}

}  // namespace

std::string shards_tokenizer(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  if (!fs::is_regular_file(path)) return "";
  const json m = read_manifest(path);
  if (m.contains("tokenizer_files") && m["tokenizer_files"].is_string()) {
    const std::string files = (fs::path(dir) / m["tokenizer_files"].get<std::string>()).string();
    KIRI_CHECK_KIND(kData, fs::is_directory(files), "corpus manifest ", path,
                    " names the tokenizer's files in ", files, ", which is missing");
    return files;
  }
  const std::string name = m["tokenizer"].get<std::string>();
  return name == "byte" || name == "gpt2" ? name : "";
}

namespace {

// An older kiri's folder (manifest format 1, no shard list): its train.bin and val.bin.
void open_kiri_v1(const std::string& dir, Dataset& ds) {
  for (TokenSource* split : {&ds.train, &ds.val}) {
    const std::string file =
        (fs::path(dir) / (split == &ds.train ? "train.bin" : "val.bin")).string();
    TokenSource src = TokenSource::open_file(file);
    if (src.segments().front().format != TokenFormat::kKiri)
      KIRI_RAISE(kData, "token shard ", file, " has no kiri header (KIRITOK1)");
    split->append(src);
  }
}

std::string hex_sum(uint64_t v) {
  char sum[17];
  std::snprintf(sum, sizeof(sum), "%016llx", static_cast<unsigned long long>(v));
  return sum;
}

// A shard entry's loss mask (sft.h): a kiri shard of kLossMaskName, as long as its shard,
// with the checksum the manifest lists.
TokenSource open_loss_mask(const std::string& dir, const json& m, uint64_t tokens,
                           const std::string& manifest) {
  if (!m.is_object() || !m.contains("file") || !m["file"].is_string() || !m.contains("fnv1a64"))
    KIRI_RAISE(kData, "corpus manifest ", manifest, ": a loss_mask needs file and fnv1a64, got ",
               quote_bounded(m.dump(), 120));
  const std::string file = m["file"].get<std::string>();
  if (file.find('/') != std::string::npos || file.empty() || file[0] == '.')
    KIRI_RAISE(kData, "corpus manifest ", manifest, ": loss mask file '", quote_bounded(file, 80),
               "' must be a plain name in its folder");
  const std::string path = (fs::path(dir) / file).string();
  TokenSource src = TokenSource::open_file(path);
  const TokenSegment& seg = src.segments().front();
  if (seg.format != TokenFormat::kKiri || seg.tokenizer != kLossMaskName ||
      seg.vocab_size != kLossMaskVocab || seg.count != tokens ||
      m["fnv1a64"] != hex_sum(seg.checksum))
    KIRI_RAISE(kData, "loss mask ", path, " (", token_format_name(seg.format), ", ", seg.tokenizer,
               ", vocab ", seg.vocab_size, ", ", seg.count, " values, checksum ",
               hex_sum(seg.checksum), ") disagrees with ", manifest, " (want ", kLossMaskName,
               ", vocab ", kLossMaskVocab, ", ", tokens, " values, checksum ", m["fnv1a64"].dump(),
               ")");
  return src;
}

// The manifest's shards, each checked against its header.
void open_kiri(const std::string& dir, Dataset& ds) {
  const std::string path = (fs::path(dir) / kManifestName).string();
  const json m = read_manifest(path);
  ds.tokenizer = m["tokenizer"].get<std::string>();
  ds.layout = "kiri";
  if (!m.contains("shards") && m.contains("format") && m["format"] == 1)
    return open_kiri_v1(dir, ds);
  if (!m.contains("shards") || !m["shards"].is_array() || m["shards"].empty())
    KIRI_RAISE(kData, "corpus manifest ", path, " lists no shards (format ",
               m.value("format", json()).dump(), "; make it again with `kiri data`)");
  int masks = -1;  // unknown until the first shard: then 1 (all have loss masks) or 0
  for (const json& s : m["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() || !s.contains("split") ||
        !s.contains("tokens") || !s["tokens"].is_number_unsigned() || !s.contains("fnv1a64"))
      KIRI_RAISE(kData, "corpus manifest ", path,
                 ": a shard entry needs file, split, tokens and "
                 "fnv1a64, got ",
                 quote_bounded(s.dump(), 120));
    const std::string file = s["file"].get<std::string>();
    if (file.find('/') != std::string::npos || file.empty() || file[0] == '.')
      KIRI_RAISE(kData, "corpus manifest ", path, ": shard file '", quote_bounded(file, 80),
                 "' must be a plain name in its folder");
    const std::string shard_path = (fs::path(dir) / file).string();
    TokenSource src = TokenSource::open_file(shard_path);
    const TokenSegment& seg = src.segments().front();
    if (seg.format != TokenFormat::kKiri)
      KIRI_RAISE(kData, "token shard ", shard_path, " has no kiri header (KIRITOK1)");
    const std::string sum = hex_sum(seg.checksum);
    if (seg.count != s["tokens"].get<uint64_t>() || s["fnv1a64"] != sum ||
        seg.tokenizer != ds.tokenizer)
      KIRI_RAISE(kData, "token shard ", shard_path, " (", seg.count, " tokens, checksum ", sum,
                 ", tokenizer ", seg.tokenizer, ") disagrees with ", path, " (", s["tokens"].dump(),
                 " tokens, checksum ", s["fnv1a64"].dump(), ", tokenizer ", ds.tokenizer, ")");
    const json split = s["split"];
    if (s.contains("loss_mask") != (masks < 0 ? s.contains("loss_mask") : masks > 0))
      KIRI_RAISE(kData, "corpus manifest ", path, ": shard ", file,
                 s.contains("loss_mask") ? " has" : " has no",
                 " loss_mask, unlike the shards before it (masks on all shards or none)");
    masks = s.contains("loss_mask") ? 1 : 0;
    if (masks) {
      const TokenSource mask = open_loss_mask(dir, s["loss_mask"], seg.count, path);
      (split == "train" ? ds.train_mask : ds.val_mask).append(mask);
    }
    if (split == "train")
      ds.train.append(src);
    else if (split == "val")
      ds.val.append(src);
    else
      KIRI_RAISE(kData, "corpus manifest ", path, ": shard ", file, " has split ", split.dump(),
                 " (want \"train\" or \"val\")");
  }
}

// nanoGPT's or llm.c's *.bin files, by the split in their names.
void open_bins(const std::string& dir, Dataset& ds) {
  std::vector<std::string> train, val;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".bin" || name[0] == '.') continue;
    if (name.find("train") != std::string::npos)
      train.push_back(e.path().string());
    else if (name.find("val") != std::string::npos)
      val.push_back(e.path().string());
  }
  if (ec) KIRI_RAISE(kData, "cannot list data.dir ", dir, ": ", ec.message());
  if (train.empty() || val.empty())
    KIRI_RAISE(kData, "data.dir ", dir, " holds no ", train.empty() ? "training" : "validation",
               " shard: want kiri's corpus.json (`kiri data --out`), nanoGPT's train.bin and "
               "val.bin, or llm.c's *train*.bin and *val*.bin");
  std::sort(train.begin(), train.end());
  std::sort(val.begin(), val.end());
  std::set<std::string> formats;
  for (auto* list : {&train, &val})
    for (const std::string& f : *list) {
      TokenSource src = TokenSource::open_file(f);
      const TokenSegment& seg = src.segments().front();
      formats.insert(token_format_name(seg.format));
      if (seg.format == TokenFormat::kKiri) {
        if (!ds.tokenizer.empty() && ds.tokenizer != seg.tokenizer)
          KIRI_RAISE(kData, "data.dir ", dir, " mixes shards of tokenizers ", ds.tokenizer, " and ",
                     seg.tokenizer, " (", f, ")");
        ds.tokenizer = seg.tokenizer;
      }
      (list == &train ? ds.train : ds.val).append(src);
    }
  ds.layout = formats.size() == 1 ? *formats.begin() : "mixed";
}

}  // namespace

Dataset open_dataset(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    KIRI_RAISE(kData, "data.dir ", dir,
               fs::exists(dir, ec) ? " is not a folder" : " does not exist",
               " (want a folder of token shards; a text file is data.corpus)");
  Dataset ds;
  ds.dir = dir;
  if (fs::exists(fs::path(dir) / kManifestName, ec))
    open_kiri(dir, ds);
  else
    open_bins(dir, ds);
  return ds;
}

}  // namespace kiri::data
