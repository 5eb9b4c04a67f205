// tokenizer.json (Hugging Face's tokenizers) -> BpeCore: the byte-level BPE
// model, its pre-tokenizer, added tokens and decoder. What is read follows
// huggingface/tokenizers and @lenml/tokenizers (transformers.js); every other
// kind or setting is refused by name.
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_map>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/gpt2_tokenizer.h"
#include "kiri/data/hf_tokenizer.h"

namespace kiri::data {

namespace {

using nlohmann::json;

std::string show(const json& v) {
  return quote_bounded(v.dump(), 80);
}

// obj[key] by reference, null when absent (or obj is no object). json::value() would copy
// it: a copy of "model" or its vocabulary held the whole tokenizer again (docs/performance.md,
// "Loading a large tokenizer.json").
const json& member(const json& obj, const char* key) {
  static const json null;
  if (!obj.is_object()) return null;
  const auto it = obj.find(key);
  return it == obj.end() ? null : *it;
}

// obj[key] when present, else an empty array.
const json& elements(const json& obj, const char* key) {
  static const json empty = json::array();
  const json& v = member(obj, key);
  return v.is_null() ? empty : v;
}

// obj[key] when it is a string, else "" (value() would throw on another type).
std::string text_at(const json& obj, const char* key) {
  if (!obj.is_object()) return "";
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

// The keys of `obj` outside `known` are refused (a setting kiri would otherwise ignore).
void only_keys(const std::string& path, const std::string& where, const json& obj,
               std::initializer_list<const char*> known) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok)
      KIRI_RAISE(kData, "tokenizer ", path, ": ", where, ".", key, " = ", show(value),
                 " is not supported (kiri reads byte-level BPE only)");
  }
}

void require(const std::string& path, bool ok, const std::string& where, const json& value,
             std::string_view why) {
  if (!ok) KIRI_RAISE(kData, "tokenizer ", path, ": ", where, " = ", show(value), ": ", why);
}

// obj[key] as a boolean (absent or null: fallback); another type is refused by its JSON path
// (`where`.key), not read as either value.
bool flag(const std::string& path, const std::string& where, const json& obj, const char* key,
          bool fallback) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  require(path, it->is_boolean(), where + "." + key, *it, "expected true or false");
  return it->get<bool>();
}

// ByteLevel{add_prefix_space false}; returns use_regex.
bool byte_level(const std::string& path, const std::string& where, const json& p) {
  only_keys(path, where, p, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  require(path, !flag(path, where, p, "add_prefix_space", false), where + ".add_prefix_space",
          member(p, "add_prefix_space"),
          "a space added before the text breaks decode(encode(s)) == s; set it false");
  flag(path, where, p, "trim_offsets", true);  // offsets only: typed, else no effect
  return flag(path, where, p, "use_regex", true);
}

// The pre-tokenizer's regex: ByteLevel's own (GPT-2's), or Split's (Llama 3's).
std::string pre_tokenizer_pattern(const std::string& path, const json& pre) {
  const std::string where = "pre_tokenizer";
  require(path, pre.is_object(), where, pre, "expected ByteLevel, or Sequence[Split, ByteLevel]");
  const std::string type = text_at(pre, "type");
  if (type == "ByteLevel") {
    // Without its regex ByteLevel keeps the text whole: one pre-token.
    return byte_level(path, where, pre) ? kGpt2Pattern : R"((?s).+)";
  }
  require(path, type == "Sequence", where + ".type", member(pre, "type"),
          "expected ByteLevel, or Sequence[Split, ByteLevel]");
  only_keys(path, where, pre, {"type", "pretokenizers"});
  const json& seq = elements(pre, "pretokenizers");
  require(path,
          seq.is_array() && seq.size() == 2 && seq[0].is_object() && seq[1].is_object() &&
              text_at(seq[0], "type") == "Split" && text_at(seq[1], "type") == "ByteLevel",
          where + ".pretokenizers", seq, "expected [Split, ByteLevel]");
  const json& split = seq[0];
  const std::string s = where + ".pretokenizers[0]";
  only_keys(path, s, split, {"type", "pattern", "behavior", "invert"});
  const json& pattern = member(split, "pattern");
  require(path, pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string(),
          s + ".pattern", pattern, "expected {\"Regex\": \"...\"}");
  require(path, member(split, "behavior") == "Isolated", s + ".behavior", member(split, "behavior"),
          "only Isolated is supported");
  require(path, !flag(path, s, split, "invert", false), s + ".invert", member(split, "invert"),
          "only false is supported");
  require(path, !byte_level(path, where + ".pretokenizers[1]", seq[1]),
          where + ".pretokenizers[1].use_regex", member(seq[1], "use_regex"),
          "a second split after Split is not supported; set it false");
  return pattern["Regex"].get<std::string>();
}

void check_pipeline(const std::string& path, const json& j) {
  // The model's kind first: a WordPiece or Unigram file fails on that, not on a detail.
  const json& model = member(j, "model");
  require(path, !model.is_object() || !model.contains("type") || text_at(model, "type") == "BPE",
          "model.type", member(model, "type"), "only BPE is supported");
  only_keys(path, "tokenizer.json", j,
            {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
             "post_processor", "decoder", "model"});
  // Truncation would cut documents and padding add tokens to them.
  for (const char* key : {"truncation", "padding", "normalizer"})
    require(path, member(j, key).is_null(), key, member(j, key),
            "not supported (kiri needs it null)");
  const json& decoder = member(j, "decoder");
  require(path, text_at(decoder, "type") == "ByteLevel", "decoder", decoder,
          "only ByteLevel is supported");
  // Post-processors add BOS/EOS around a sequence or set offsets: kiri's
  // encode() adds no tokens (documented), so these change nothing.
  const json& post = member(j, "post_processor");
  auto post_ok = [](const json& p) {
    const std::string t = text_at(p, "type");
    return t == "ByteLevel" || t == "TemplateProcessing";
  };
  bool ok = post.is_null() || post_ok(post);
  if (text_at(post, "type") == "Sequence") {
    ok = true;
    for (const auto& p : elements(post, "processors")) ok = ok && post_ok(p);
  }
  require(path, ok, "post_processor", post,
          "only ByteLevel, TemplateProcessing or a Sequence of them is supported");
}

std::string bytes_of(const std::string& path, const std::string& token, int64_t id,
                     const std::vector<HfAddedToken>& added) {
  std::string bytes;
  if (gpt2_unicode_to_bytes(token, bytes)) return bytes;
  for (const auto& a : added)
    if (a.id == id) return a.content;  // an added token kept in the model's vocab
  KIRI_RAISE(kData, "tokenizer ", path, ": model.vocab token ", quote_bounded(token, 60), " (id ",
             id, ") is not in the byte-level alphabet");
}

void load_model(const std::string& path, json& model, const std::vector<HfAddedToken>& added,
                int64_t id_limit, BpeCore& core) {
  require(path, model.is_object(), "model", model, "expected a BPE model object");
  require(path, !model.contains("type") || text_at(model, "type") == "BPE", "model.type",
          member(model, "type"), "only BPE is supported");
  only_keys(path, "model", model,
            {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
             "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const json& v = member(model, key);
    require(path, v.is_null() || v == "" || v == 0, std::string("model.") + key, v,
            "not supported (kiri needs it null)");
  }
  require(path, !flag(path, "model", model, "byte_fallback", false), "model.byte_fallback",
          member(model, "byte_fallback"), "not supported (byte-level BPE needs no fallback)");
  flag(path, "model", model, "fuse_unk", false);  // no unknown tokens in byte-level BPE
  const json& unk = member(model, "unk_token");
  require(path, unk.is_null() || unk.is_string(), "model.unk_token", unk,
          "expected a string or null");
  core.set_ignore_merges(flag(path, "model", model, "ignore_merges", false));
  const json& vocab = member(model, "vocab");
  require(path, vocab.is_object() && !vocab.empty(), "model.vocab", vocab,
          "expected a non-empty object of token -> id");
  // Views of the vocabulary's keys, which outlive the map: no second copy of every token.
  std::unordered_map<std::string_view, int32_t> by_unicode;
  by_unicode.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& token = it.key();
    const json& value = it.value();
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    require(path, id >= 0 && id < id_limit, "model.vocab[" + quote_bounded(token, 60) + "]", value,
            "expected an id in [0, " + std::to_string(id_limit) + "): the tokens + 65,536");
    core.set_token(static_cast<int32_t>(id), bytes_of(path, token, id, added));
    by_unicode.emplace(token, static_cast<int32_t>(id));
  }
  core.finish();
  require(path, member(model, "merges").is_array(), "model.merges", member(model, "merges"),
          "expected an array");
  json& merges = model["merges"];
  auto lookup = [&](std::string_view token, size_t i) {
    const auto it = by_unicode.find(token);
    if (it == by_unicode.end())
      KIRI_RAISE(kData, "tokenizer ", path, ": model.merges[", i, "]: token ",
                 quote_bounded(token, 60), " is not in model.vocab");
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    json& m = merges[i];
    std::string left, right;
    if (m.is_string()) {  // "a b" (tokenizers < 0.20)
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      require(path,
              space != std::string::npos && space > 0 && space + 1 < s.size() &&
                  s.find(' ', space + 1) == std::string::npos,
              "model.merges[" + std::to_string(i) + "]", m, "expected two tokens and one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {  // ["a", "b"] (tokenizers >= 0.20)
      require(path, m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
              "model.merges[" + std::to_string(i) + "]", m, "expected \"a b\" or [\"a\", \"b\"]");
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    // A pair listed twice keeps its last rank, as in tokenizers and transformers.js.
    core.add_merge(lookup(left, i), lookup(right, i), lookup(left + right, i),
                   static_cast<uint32_t>(i), /*replace=*/true);
    m = nullptr;  // its text is no longer needed: freed as the merge map grows
  }
}

std::unique_ptr<BpeCore> load_parsed(const std::string& path, json& j,
                                     std::vector<HfAddedToken>& added) {
  require(path, j.is_object(), "tokenizer.json", j, "expected an object");
  check_pipeline(path, j);
  const json& list = elements(j, "added_tokens");
  require(path, list.is_array(), "added_tokens", list, "expected an array");
  std::set<std::string> contents;
  // Ids index arrays: a few gaps are fine, an id of 2^30 in a small file is not.
  const json& model = member(j, "model");
  const json& vocab = member(model, "vocab");
  const int64_t id_limit =
      static_cast<int64_t>((vocab.is_object() ? vocab.size() : 0) + list.size()) + 65536;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& a = list[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    require(path,
            a.is_object() && member(a, "id").is_number_integer() &&
                member(a, "content").is_string() && !a["content"].get<std::string>().empty(),
            where, a, "expected {\"id\": N, \"content\": \"...\"}");
    only_keys(path, where, a,
              {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    // Stripping drops the whitespace beside the token (decode(encode(s)) != s);
    // single_word is honoured by tokenizers, ignored by transformers.js.
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      require(path, !flag(path, where, a, key, false), where + "." + key, member(a, key),
              "not supported (kiri needs it false)");
    for (const char* key : {"normalized", "special"}) flag(path, where, a, key, false);
    const int64_t id = a["id"].get<int64_t>();
    require(path, id >= 0 && id < id_limit, where + ".id", a["id"],
            "expected an id in [0, " + std::to_string(id_limit) + "): the tokens + 65,536");
    const std::string content = a["content"].get<std::string>();
    require(path, contents.insert(content).second, where + ".content", a["content"], "repeated");
    added.push_back({content, static_cast<int32_t>(id)});
  }
  const std::string pattern = pre_tokenizer_pattern(path, member(j, "pre_tokenizer"));
  auto core = std::make_unique<BpeCore>(pattern, "tokenizer " + path);
  require(path, model.is_object(), "model", model, "expected a BPE model object");
  load_model(path, j["model"], added, id_limit, *core);
  for (const auto& a : added) core->add_special(a.content, a.id);
  return core;
}

}  // namespace

std::unique_ptr<BpeCore> load_tokenizer_json(const std::string& path, const std::string& text,
                                             std::vector<HfAddedToken>& added) {
  if (json_nesting_depth(text, 33) > 32)
    KIRI_RAISE(kData, "tokenizer ", path, " nests JSON deeper than 32 levels");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    KIRI_RAISE(kData, "tokenizer ", path, " is not valid JSON: ", e.what());
  }
  try {
    return load_parsed(path, j, added);
  } catch (const json::exception& e) {  // a value of the wrong JSON type somewhere
    KIRI_RAISE(kData, "tokenizer ", path, " is malformed: ", e.what());
  }
}

}  // namespace kiri::data
