// The data and tokenizer fingerprints of a checkpoint (fingerprint.h).
#include "kiri/train/fingerprint.h"

#include <cstdio>
#include <filesystem>
#include <vector>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/hash.h"

namespace kiri::train {

using nlohmann::json;

namespace {

// A tokenizer file is at most 1 GiB (the reader's own bound, hf_tokenizer.h).
constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{1} << 30;

std::string hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

uint64_t file_hash(const std::string& path) {
  return fnv1a64(read_small_file(path, kMaxTokenizerFileBytes, ErrorKind::kData, "tokenizer file"));
}

json split_fingerprint(const data::TokenSource& split) {
  uint64_t h = kFnv1a64Offset;
  for (const data::TokenSegment& s : split.segments()) {
    // A kiri shard's checksum stands for its payload (TokenSource::verify checks it); the
    // count and width go in too, so that the same bytes read another way differ.
    const uint64_t sum = s.has_checksum ? s.checksum : fnv1a64({s.data, s.count * s.width});
    for (uint64_t v : {sum, s.count, static_cast<uint64_t>(s.width)})
      h = fnv1a64({reinterpret_cast<const unsigned char*>(&v), sizeof v}, h);
  }
  return {{"tokens", split.size()}, {"hash", hex(h)}};
}

std::string quoted(const json& j) {
  return quote_bounded(j.is_string() ? j.get<std::string>() : j.dump(), 80);
}

// "train" -> "training split", for messages.
std::string split_name(const std::string& split) {
  return split == "train" ? "training split" : "validation split";
}

// The first difference between a recorded split and this run's, in words; "" when equal.
std::string split_change(const json& was, const json& now, const std::string& split,
                         const std::string& dir) {
  if (!was.is_object() || was == now) return "";
  return str("the ", split_name(split), " of ", dir,
             " changed: ", quoted(was.value("tokens", json())), " tokens hashing to ",
             quoted(was.value("hash", json())), " then, ", now.at("tokens").dump(),
             " tokens hashing to ", now.at("hash").get<std::string>(), " now");
}

std::string tokenizer_change(const json& was, const json& now, const std::string& name,
                             const std::string& where) {
  if (!was.is_object()) return "";
  if (was.value("name", json()) != now.at("name"))
    return str("the tokenizer data.tokenizer = ", name, " changed: it was ",
               quoted(was.value("name", json())), " (", where, "), it is ",
               now.at("name").get<std::string>(), " now");
  const json files = was.value("files", json::object());
  for (const auto& [file, hash] : now.at("files").items())
    if (files.value(file, json()) != hash)
      return str("the tokenizer data.tokenizer = ", name, " changed: its ", file, " hashed to ",
                 quoted(files.value(file, json("(absent)"))), " (", where, "), it hashes to ",
                 hash.get<std::string>(), " now");
  return "";
}

// A checkpoint from before the fingerprints: the tokenizer files against its own copies.
json checkpoint_copies(const json& now, const std::string& dir) {
  json was = {{"name", now.at("name")}, {"files", json::object()}};
  for (const auto& [file, hash] : now.at("files").items()) {
    std::error_code ec;
    const std::string copy = dir + "/" + file;
    was["files"][file] = std::filesystem::exists(copy, ec) ? json(hex(file_hash(copy))) : hash;
  }
  return was;
}

}  // namespace

json tokenizer_fingerprint(const data::Tokenizer& tokenizer) {
  json files = json::object();
  for (const data::TokenizerFile& f : tokenizer.files()) files[f.hf_name] = hex(file_hash(f.path));
  return {{"name", tokenizer.name()}, {"files", files}};
}

json data_fingerprint(const data::Dataset& dataset) {
  return {{"dir", dataset.dir},
          {"train", split_fingerprint(dataset.train)},
          {"val", split_fingerprint(dataset.val)}};
}

std::string check_fingerprints(const json& recorded, const json& tokenizer, const json& data,
                               const std::string& checkpoint_dir, const std::string& tokenizer_name,
                               bool accept) {
  const std::string state = checkpoint_dir + "/state.json";
  std::vector<std::string> changes;
  if (recorded.is_object()) {
    if (std::string c = tokenizer_change(recorded.value("tokenizer", json()), tokenizer,
                                         tokenizer_name, "recorded in " + state);
        !c.empty())
      changes.push_back(c);
    const json was = recorded.value("data", json());
    const std::string dir = data.at("dir").get<std::string>();
    for (const char* split : {"train", "val"})
      if (std::string c = split_change(was.is_object() ? was.value(split, json()) : json(),
                                       data.at(split), split, dir);
          !c.empty())
        changes.push_back(c);
  } else if (std::string c =
                 tokenizer_change(checkpoint_copies(tokenizer, checkpoint_dir), tokenizer,
                                  tokenizer_name, "the copy in " + checkpoint_dir);
             !c.empty()) {
    changes.push_back(c);
  }
  if (changes.empty()) return "";
  std::string all;
  for (const std::string& c : changes) all += (all.empty() ? "" : "; ") + c;
  if (accept)
    return str("--accept-data-change: loading ", checkpoint_dir, " on other tokens: ", all);
  KIRI_RAISE(kData, checkpoint_dir, " was trained on other tokens: ", all,
             " (since the checkpoint was saved); restore them, start a new run, or give "
             "--accept-data-change to continue on these");
}

}  // namespace kiri::train
