#pragma once
// Chat templates of Hugging Face tokenizers (tokenizer_config.json's chat_template) rendered
// by a subset of Jinja: the one Llama 3's and ChatML's templates use (docs/data.md, "Chat
// templates"). Anything else is refused at parse time, naming the construct.
#include <memory>
#include <string>
#include <vector>

#include "kiri/data/sft.h"

namespace kiri::data {

struct ChatTemplateNode;

class ChatTemplate {
 public:
  // Parses source; raises kData naming `label` and the construct kiri does not render.
  ChatTemplate(const std::string& source, const std::string& label);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // The rendered text as spans: the characters that come from an assistant message's
  // content are counted, and so is an end-of-turn marker (<|eot_id|>, <|im_end|>) that
  // directly follows them. Raises kData naming `label` on an error while rendering (an
  // undefined variable, + of a string and a number).
  std::vector<TextSpan> render(const std::vector<ChatMessage>& messages,
                               const std::string& bos_token, const std::string& eos_token,
                               bool add_generation_prompt) const;

 private:
  std::string label_;
  std::vector<std::unique_ptr<ChatTemplateNode>> body_;
};

// A Hugging Face tokenizer's own template: tokenizer_config.json in the tokenizer's folder
// (or beside its tokenizer.json) holds chat_template, bos_token and eos_token.
struct TokenizerChatTemplate {
  std::string source, bos_token, eos_token;
};
// Raises kData naming the file when it is missing, has no chat_template string (a list of
// named templates is refused, naming it), or is not JSON.
TokenizerChatTemplate read_tokenizer_chat_template(const std::string& tokenizer_path);

// The text of spans, joined.
std::string join_spans(const std::vector<TextSpan>& spans);

}  // namespace kiri::data
