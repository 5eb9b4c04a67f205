#pragma once
// The inputs of `kiri data`: files, folders and globs, read as documents of
// plain text, JSON Lines or tokens, and encoded into one token sequence with
// the tokenizer's end-of-text token between documents.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kiri/data/tokenizer.h"

namespace kiri::data {

// kChat and kPromptCompletion: fine-tuning JSON Lines with a loss mask (sft.h).
enum class InputFormat { kAuto, kText, kJsonl, kTokens, kChat, kPromptCompletion };
// "auto", "text", "jsonl", "tokens", "chat", "prompt-completion"; another name raises kConfig.
InputFormat parse_input_format(const std::string& name);
const char* input_format_name(InputFormat f);

struct DocumentOptions {
  InputFormat format = InputFormat::kAuto;
  std::string separator;          // text: "" = one document per file, else split on it
  std::string text_key = "text";  // jsonl: the member that holds a document's text
  // chat: a Jinja chat template (chat_template.h) and its bos_token and eos_token; an
  // empty template is kiri's simple one (sft.h).
  std::string chat_template, bos_token, eos_token;
};

// Each input as files: a file as given, a folder's regular files recursively
// (sorted by path, hidden names skipped), a pattern with * ? [ expanded by
// glob(3) (sorted; one that matches nothing is kData). A missing path is kData.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// Raises kData naming the file when bytes look binary rather than text: any
// NUL byte, or more than 1% of the bytes (of at least 8) in invalid UTF-8
// sequences (docs/data.md, "Binary files").
void check_text(std::string_view bytes, const std::string& path);

// Each non-blank line of JSON Lines `bytes`, parsed (a discarded json when the line is not
// JSON), with "LABEL:LINE" to name it in messages. A line nesting deeper than 64 levels is
// kData (nlohmann's recursive parser would exhaust the stack).
void for_each_jsonl_line(std::string_view bytes, const std::string& label,
                         const std::function<void(const std::string& where, std::string_view line,
                                                  const nlohmann::json& j)>& each);

// One source's contribution, for the manifest.
struct SourceInfo {
  std::string path;
  uint64_t bytes = 0;
  std::string format;  // text, jsonl, or a token format (kiri, llm.c, nanoGPT)
  uint64_t documents = 0;
  uint64_t tokens = 0;
};

// Appends the documents of one file to tokens, an end-of-text token before
// every document but the very first of the corpus. Raises kData naming the
// file (and line, for JSON Lines) on a binary text, a JSON line that is not an
// object with a string `text_key`, or tokens at or above the tokenizer's
// vocabulary; kConfig when the tokenizer has no end-of-text token and a second
// document arrives.
SourceInfo append_documents(const std::string& path, const Tokenizer& tokenizer,
                            const DocumentOptions& opts, std::vector<int32_t>& tokens,
                            uint64_t& documents);

// The text or JSON Lines part of append_documents over bytes in memory (`label` names
// them in messages; the fuzz target's entry point): checks they are text, then appends
// their documents and counts them in info.documents.
void append_text_documents(std::string_view bytes, const std::string& label, bool jsonl,
                           const Tokenizer& tokenizer, const DocumentOptions& opts,
                           std::vector<int32_t>& tokens, uint64_t& documents, SourceInfo& info);

}  // namespace kiri::data
