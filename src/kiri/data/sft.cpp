#include "kiri/data/sft.h"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "kiri/base/error.h"
#include "kiri/base/file_read.h"
#include "kiri/data/chat_template.h"
#include "kiri/data/token_source.h"

namespace kiri::data {

namespace {

const std::string& string_member(const nlohmann::json& j, const char* key,
                                 const std::string& where) {
  if (!j.contains(key) || !j[key].is_string())
    KIRI_RAISE(kData, where, ": want a string \"", key, "\", got ",
               j.contains(key) ? quote_bounded(j[key].dump(), 80) : std::string("none"));
  return j[key].get_ref<const std::string&>();
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    KIRI_RAISE(kData, where, ": want a non-empty array \"messages\" (--format chat), got ",
               quote_bounded(j.dump(), 80));
  std::vector<ChatMessage> out;
  size_t i = 0;
  for (const nlohmann::json& m : j["messages"]) {
    const std::string at = str(where, ": messages[", i++, "]");
    if (!m.is_object()) KIRI_RAISE(kData, at, " is not an object: ", quote_bounded(m.dump(), 80));
    out.push_back({string_member(m, "role", at), string_member(m, "content", at)});
  }
  return out;
}

}  // namespace

bool is_sft_format(InputFormat f) {
  return f == InputFormat::kChat || f == InputFormat::kPromptCompletion;
}

std::vector<TextSpan> render_simple_chat(const std::vector<ChatMessage>& messages) {
  std::vector<TextSpan> spans;
  for (const ChatMessage& m : messages) {
    spans.push_back({"<|" + m.role + "|>\n", false});
    spans.push_back({m.content + "\n", m.role == "assistant"});
  }
  return spans;
}

std::vector<TextSpan> render_prompt_completion(const std::string& prompt,
                                               const std::string& completion) {
  return {{prompt, false}, {completion, true}};
}

void append_spans(const std::vector<TextSpan>& spans, const Tokenizer& tok,
                  std::vector<int32_t>& tokens, std::vector<uint8_t>& mask) {
  KIRI_CHECK_KIND(kConfig, tok.eot_token() >= 0, "tokenizer ", tok.name(),
                  " has no end-of-text token to end each fine-tuning document with");
  for (const TextSpan& s : spans) {
    if (s.text.empty()) continue;
    const std::vector<int32_t> ids = tok.encode(s.text);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
    mask.insert(mask.end(), ids.size(), s.counted ? 1 : 0);
  }
  tokens.push_back(tok.eot_token());
  mask.push_back(!spans.empty() && spans.back().counted ? 1 : 0);
}

void append_sft_jsonl(std::string_view bytes, const std::string& label, const DocumentOptions& opts,
                      const Tokenizer& tok, std::vector<int32_t>& tokens,
                      std::vector<uint8_t>& mask, uint64_t& documents, SourceInfo& info) {
  const InputFormat f = opts.format;
  std::unique_ptr<ChatTemplate> tmpl;
  if (f == InputFormat::kChat && !opts.chat_template.empty())
    tmpl = std::make_unique<ChatTemplate>(opts.chat_template, "the chat template");
  KIRI_CHECK_KIND(kInternal, is_sft_format(f), "append_sft_jsonl of format ", input_format_name(f));
  check_text(bytes, label);
  for_each_jsonl_line(
      bytes, label, [&](const std::string& where, std::string_view line, const nlohmann::json& j) {
        if (j.is_discarded() || !j.is_object())
          KIRI_RAISE(kData, where, ": not a JSON object: ", quote_bounded(line, 80));
        if (f == InputFormat::kChat && tmpl)
          append_spans(tmpl->render(messages_of(j, where), opts.bos_token, opts.eos_token, false),
                       tok, tokens, mask);
        else if (f == InputFormat::kChat)
          append_spans(render_simple_chat(messages_of(j, where)), tok, tokens, mask);
        else
          append_spans(render_prompt_completion(string_member(j, "prompt", where),
                                                string_member(j, "completion", where)),
                       tok, tokens, mask);
        ++documents;
        ++info.documents;
      });
}

SourceInfo append_sft_documents(const std::string& path, const Tokenizer& tok,
                                const DocumentOptions& opts, std::vector<int32_t>& tokens,
                                std::vector<uint8_t>& mask, uint64_t& documents) {
  SourceInfo info;
  info.path = std::filesystem::absolute(path).lexically_normal().string();
  info.format = input_format_name(opts.format);
  const uint64_t before = tokens.size();
  const MappedFile file(path, "fine-tuning data");
  info.bytes = file.size();
  append_sft_jsonl({reinterpret_cast<const char*>(file.data()), file.size()}, path, opts, tok,
                   tokens, mask, documents, info);
  info.tokens = tokens.size() - before;
  return info;
}

}  // namespace kiri::data
