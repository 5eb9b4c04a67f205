#pragma once
// Supervised fine-tuning documents (docs/data.md, "Fine-tuning data"): JSON Lines in TRL's
// dataset formats, `messages` (a conversation of role/content) or `prompt`/`completion`,
// rendered as text spans, each marked counted (the loss is taken on its tokens) or not, and
// encoded with a loss mask of 0/1 per token.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kiri/data/documents.h"
#include "kiri/data/tokenizer.h"

namespace kiri::data {

// A piece of a rendered document; counted pieces are what the model is trained to produce.
struct TextSpan {
  std::string text;
  bool counted = false;
};

struct ChatMessage {
  std::string role, content;
};

// The mask file's name in a shard header, and its "vocabulary" (0 and 1).
inline constexpr const char* kLossMaskName = "loss-mask";
inline constexpr uint32_t kLossMaskVocab = 2;

// Whether a format is one of the fine-tuning formats (chat, prompt-completion).
bool is_sft_format(InputFormat f);

// kiri's simple chat template: each message is "<|ROLE|>\n" then its content and "\n";
// an assistant's content and that "\n" are counted, the rest is not.
std::vector<TextSpan> render_simple_chat(const std::vector<ChatMessage>& messages);

// TRL's prompt-completion: the prompt (not counted) followed directly by the completion
// (counted).
std::vector<TextSpan> render_prompt_completion(const std::string& prompt,
                                               const std::string& completion);

// Appends one document: each span encoded on its own (a counted span's tokens get mask 1),
// then the tokenizer's end-of-text token, counted when the last span is (the model learns
// to stop). kConfig when the tokenizer has no end-of-text token.
void append_spans(const std::vector<TextSpan>& spans, const Tokenizer& tok,
                  std::vector<int32_t>& tokens, std::vector<uint8_t>& mask);

// The documents of a JSON Lines text in format opts.format (chat, rendered by
// opts.chat_template when it is set; or prompt-completion), one per
// non-blank line. Raises kData naming label:line and the member on a line that is not an
// object of that format (messages: a non-empty array of objects with string role and
// content; prompt and completion: strings).
void append_sft_jsonl(std::string_view bytes, const std::string& label, const DocumentOptions& opts,
                      const Tokenizer& tok, std::vector<int32_t>& tokens,
                      std::vector<uint8_t>& mask, uint64_t& documents, SourceInfo& info);

}  // namespace kiri::data

namespace kiri::data {

// append_sft_jsonl over one file (its path in messages); the source's info for the manifest.
SourceInfo append_sft_documents(const std::string& path, const Tokenizer& tok,
                                const DocumentOptions& opts, std::vector<int32_t>& tokens,
                                std::vector<uint8_t>& mask, uint64_t& documents);

}  // namespace kiri::data
