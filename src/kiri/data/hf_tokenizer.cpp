#include "kiri/data/hf_tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/base/hash.h"
#include "kiri/data/gpt2_tokenizer.h"

namespace kiri::data {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The largest tokenizer file kiri reads. Llama 3's tokenizer.json is 9 MB; loading one
// costs about 9x its size in memory at peak (the JSON DOM, then the vocabulary and merge
// tables: docs/performance.md, "Loading a large tokenizer.json"), so 256 MiB, 28x Llama 3's,
// bounds a load at about 2.5 GB. A larger file is refused by name before it is read.
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

std::string read_text(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (const uint64_t size = fs::file_size(path, ec); !ec && size > kMaxFileBytes)
    KIRI_RAISE(kData, what, " ", path, " is ", size,
               " bytes, more than kiri's limit for tokenizer files, 256 MiB (268435456 bytes: "
               "28x Llama 3's tokenizer.json; loading costs about 9x the file's size in memory, "
               "docs/performance.md)");
  return read_small_file(path, kMaxFileBytes, ErrorKind::kData, what);
}

json read_json(const std::string& path, const std::string& what) {
  const std::string text = read_text(path, what);
  if (json_nesting_depth(text, 33) > 32)
    KIRI_RAISE(kData, what, " ", path, " nests JSON deeper than 32 levels");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    KIRI_RAISE(kData, what, " ", path, " is not valid JSON: ", e.what());
  }
}

// A special token as tokenizer_config.json and special_tokens_map.json write
// it: "<s>" or {"content": "<s>", ...}; empty when absent or null. Another type (an id,
// an object without a string content) is kData naming the file and `key`, not ignored.
std::string token_content(const json& v, const std::string& path, const std::string& key) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  KIRI_RAISE(kData, "tokenizer config ", path, ": ", key, " = ", quote_bounded(v.dump(), 80),
             ": expected a token's text, \"...\", or {\"content\": \"...\"} (or null)");
}

// What the two config files say about special tokens (transformers' reading:
// tokenizer_config.json first, then special_tokens_map.json).
struct SpecialConfig {
  std::string eos, bos;
  std::vector<std::string> named;      // bos, eos, unk, pad, ...: split out of text
  std::vector<HfAddedToken> declared;  // tokenizer_config.json's added_tokens_decoder
};

void read_config(const json& c, const std::string& path, SpecialConfig& out) {
  if (!c.is_object()) KIRI_RAISE(kData, "tokenizer config ", path, " is not a JSON object");
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                          "cls_token", "mask_token"}) {
    const std::string t = token_content(c.value(key, json()), path, key);
    if (t.empty()) continue;
    out.named.push_back(t);
    if (std::string_view(key) == "eos_token" && out.eos.empty()) out.eos = t;
    if (std::string_view(key) == "bos_token" && out.bos.empty()) out.bos = t;
  }
  const json extra = c.value("additional_special_tokens", json::array());
  if (!extra.is_array())
    KIRI_RAISE(kData, "tokenizer config ", path,
               ": additional_special_tokens = ", quote_bounded(extra.dump(), 80),
               ": expected an array");
  for (size_t i = 0; i < extra.size(); ++i) {
    const std::string t =
        token_content(extra[i], path, "additional_special_tokens[" + std::to_string(i) + "]");
    if (!t.empty()) out.named.push_back(t);
  }
  const json declared = c.value("added_tokens_decoder", json::object());
  for (const auto& [id, t] : declared.items()) {
    char* end = nullptr;
    const long long n = std::strtoll(id.c_str(), &end, 10);
    const bool ok =
        t.is_string() || (t.is_object() && t.contains("content") && t["content"].is_string());
    const std::string content = ok ? token_content(t, path, "added_tokens_decoder") : "";
    if (id.empty() || *end != '\0' || n < 0 || n >= (1ll << 30) || content.empty())
      KIRI_RAISE(kData, "tokenizer config ", path, ": added_tokens_decoder[", quote_bounded(id, 40),
                 "] is not an id in [0, 2^30) with a content");
    out.declared.push_back({content, static_cast<int32_t>(n)});
  }
}

// files() are copied later, perhaps from another working directory.
std::string absolute(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// Where the files are: the folder, and tokenizer.json (empty: vocab.json + merges.txt).
struct Sources {
  fs::path dir, tokenizer_json;
};

Sources find_sources(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) {
    if (is_file(p / "tokenizer.json")) return {p, p / "tokenizer.json"};
    if (is_file(p / "vocab.json") && is_file(p / "merges.txt")) return {p, {}};
    KIRI_RAISE(kData, "tokenizer folder ", path,
               " holds neither tokenizer.json nor vocab.json + merges.txt");
  }
  if (is_file(p)) return {p.parent_path().empty() ? fs::path(".") : p.parent_path(), p};
  KIRI_RAISE(kData, "tokenizer ", path,
             fs::exists(p, ec) ? " is neither a folder nor a regular file" : " does not exist",
             " (expected a folder with tokenizer.json or vocab.json + merges.txt, or a "
             "tokenizer.json file)");
}

// Reads the config files in dir into special; returns (hf name, path) of those read.
std::vector<std::pair<std::string, std::string>> read_configs(const fs::path& dir,
                                                              SpecialConfig& special) {
  std::vector<std::pair<std::string, std::string>> used;
  std::error_code ec;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string f = (dir / name).string();
    if (!fs::exists(dir / name, ec)) continue;
    if (!is_file(dir / name)) KIRI_RAISE(kData, "tokenizer config ", f, " is not a regular file");
    try {
      read_config(read_json(f, "tokenizer config"), f, special);
    } catch (const json::exception& e) {
      KIRI_RAISE(kData, "tokenizer config ", f, " is malformed: ", e.what());
    }
    used.emplace_back(name, f);
  }
  return used;
}

// Added tokens with their ids; then the configs' named special tokens, which
// transformers also splits out of the text, found by their content.
void add_specials(BpeCore& core, const std::string& path, const std::vector<HfAddedToken>& added,
                  const std::vector<std::string>& named) {
  const int64_t id_limit = int64_t{core.vocab_size()} + static_cast<int64_t>(added.size()) + 65536;
  for (const auto& a : added) {
    if (a.id >= id_limit)  // ids index arrays: a few gaps are fine, 2^30 is not
      KIRI_RAISE(kData, "tokenizer ", path, ": added token ", quote_bounded(a.content, 60),
                 " has id ", a.id, ", beyond the vocabulary's ", core.vocab_size(), " + 65,536");
    core.add_special(a.content, a.id);
  }
  for (const auto& t : named) {
    const int32_t id = core.find(t);
    if (id < 0)
      KIRI_RAISE(kData, "tokenizer ", path, ": special token ", quote_bounded(t, 60),
                 " (from its config) is not in the vocabulary");
    core.add_special(t, id);
  }
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) {
  const Sources src = find_sources(path);
  SpecialConfig special;
  const auto used = read_configs(src.dir, special);
  uint64_t hash = kFnv1a64Offset;
  std::vector<HfAddedToken> added;
  if (!src.tokenizer_json.empty()) {
    const std::string f = src.tokenizer_json.string(), text = read_text(f, "tokenizer");
    hash = fnv1a64(text, hash);
    core_ = load_tokenizer_json(f, text, added);
    files_.push_back({"tokenizer.json", absolute(f)});
  } else {
    const std::string vocab = (src.dir / "vocab.json").string();
    const std::string merges = (src.dir / "merges.txt").string();
    hash = fnv1a64(read_text(merges, "tokenizer merges"),
                   fnv1a64(read_text(vocab, "tokenizer vocab"), hash));
    core_ = std::make_unique<BpeCore>(kGpt2Pattern, "tokenizer " + path);
    load_gpt2_files(*core_, vocab, merges, "tokenizer");
    files_.push_back({"vocab.json", absolute(vocab)});
    files_.push_back({"merges.txt", absolute(merges)});
    // transformers' GPT2Tokenizer: <|endoftext|> is bos, eos and unk unless configured.
    if (core_->find("<|endoftext|>") >= 0) special.named.push_back("<|endoftext|>");
    added = special.declared;
  }
  for (const auto& [name, f] : used) files_.push_back({name, absolute(f)});
  add_specials(*core_, path, added, special.named);

  auto resolve = [&](const std::string& t, std::initializer_list<const char*> fallbacks) {
    if (!t.empty()) return core_->find(t);  // found: every named token was checked above
    for (const char* f : fallbacks)
      if (core_->find(f) >= 0) return core_->find(f);
    return int32_t{-1};
  };
  eot_ = resolve(special.eos, {"<|endoftext|>", "<|end_of_text|>"});
  bos_ = resolve(special.bos, {});

  // The name identifies the ids: the vocabulary files and the special tokens.
  for (const auto& t : special.named) hash = fnv1a64(t, fnv1a64("|special|", hash));
  hash = fnv1a64("|eot=" + std::to_string(eot_), hash);
  char hex[16];
  std::snprintf(hex, sizeof(hex), "%08x", static_cast<unsigned>(hash ^ (hash >> 32)));
  name_ = std::string("hf-") + hex;
}

HfTokenizer::~HfTokenizer() = default;

}  // namespace kiri::data
