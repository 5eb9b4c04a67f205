// kiri's Jinja subset (data/chat_template.h) against transformers' apply_chat_template on the
// Llama 3 tokenizer's own template (data/llama3/tokenizer_config.json), 5 conversations: the
// same text, and the same ids when kiri encodes the rendered pieces one by one. Skipped,
// naming the reason, when the test venv (scripts/test-venv.sh) cannot be made.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/run_kiri.h"
#include "cli/test_venv.h"
#include "kiri/data/chat_template.h"
#include "kiri/data/hf_tokenizer.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace {

using kiri::data::ChatMessage;
using nlohmann::json;

const std::vector<std::vector<ChatMessage>> kConversations = {
    {{"user", "Hello!"}, {"assistant", "Hi, how can I help?"}},
    {{"system", "You are terse."}, {"user", "2+2?"}, {"assistant", "4"}},
    {{"user", "  padded question \n"}, {"assistant", "\n  padded answer  "}},
    {{"user", "Write two lines."},
     {"assistant", "Line one,\nline two."},
     {"user", "Now in French, with \"quotes\"."},
     {"assistant", "Ligne un,\nligne deux: « citation »."}},
    {{"system", "Multi\n\nparagraph system."}, {"user", "Naïve café? ✓"}, {"assistant", "Oui."}}};

TEST(ChatTemplateHf, Llama3TemplateMatchesApplyChatTemplate) {
  std::string why;
  const std::string py = kiri::testing::venv_python(&why);
  if (py.empty()) GTEST_SKIP() << "no transformers: " << why;
  const std::string tok_dir = std::string(KIRI_TEST_DATA_DIR) + "/llama3";
  const std::string dir = kiri::testing::temp_dir("llama3");
  json convs = json::array();
  for (const auto& c : kConversations) {
    json msgs = json::array();
    for (const ChatMessage& m : c) msgs.push_back({{"role", m.role}, {"content", m.content}});
    convs.push_back(msgs);
  }
  std::ofstream(dir + "/convs.json") << convs.dump();
  const auto r =
      kiri::testing::run_shell(py + " " + KIRI_SOURCE_DIR + "/tests/cli/hf_chat_template.py " +
                               tok_dir + " " + dir + "/convs.json " + dir + "/out.json 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  json want;
  std::ifstream(dir + "/out.json") >> want;

  std::ifstream cfg_file(tok_dir + "/tokenizer_config.json");
  const json cfg = json::parse(cfg_file);
  const kiri::data::ChatTemplate tmpl(cfg["chat_template"].get<std::string>(), "llama3");
  const kiri::data::HfTokenizer tok(tok_dir);
  for (size_t i = 0; i < kConversations.size(); ++i) {
    const auto spans = tmpl.render(kConversations[i], cfg["bos_token"], cfg["eos_token"], false);
    EXPECT_EQ(kiri::data::join_spans(spans), want["texts"][i].get<std::string>())
        << "conversation " << i;
    std::vector<int32_t> ids;
    int counted = 0;
    for (const auto& s : spans) {
      const auto piece = tok.encode(s.text);
      ids.insert(ids.end(), piece.begin(), piece.end());
      counted += s.counted ? static_cast<int>(piece.size()) : 0;
    }
    EXPECT_EQ(ids, want["ids"][i].get<std::vector<int32_t>>()) << "conversation " << i;
    EXPECT_GT(counted, 0) << "conversation " << i;  // the assistant's turns count
  }
}

// ChatML's template (Qwen's and others'): the assistant's content and its <|im_end|> count.
TEST(ChatTemplate, ChatMlCountsTheAssistantTurnAndItsEnd) {
  const kiri::data::ChatTemplate t(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "chatml");
  const auto spans = t.render({{"user", "Hi"}, {"assistant", "Yo"}}, "", "", true);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(spans[0].counted);
  EXPECT_EQ(spans[1].text, "Yo<|im_end|>");
  EXPECT_TRUE(spans[1].counted);
  EXPECT_EQ(spans[2].text, "\n<|im_start|>assistant\n");
}

// loop.first/last/index, elif/else, not/and/or, whitespace control, attribute access.
TEST(ChatTemplate, LoopsConditionsAndWhitespaceControl) {
  const kiri::data::ChatTemplate t(
      "{%- for m in messages -%}\n  {{ loop.index }}{% if loop.first %}F{% elif loop.last %}L"
      "{% else %}M{% endif %}{% if not (m.role == 'user' and false) or false %}:"
      "{{ m.content | trim }};{% endif %}\n{%- endfor %}{{ bos_token }}",
      "t");
  const auto spans =
      t.render({{"user", " a "}, {"assistant", "b"}, {"user", "c"}}, "<s>", "", false);
  EXPECT_EQ(kiri::data::join_spans(spans), "1F:a;2M:b;3L:c;<s>");
  std::string counted;
  for (const auto& s : spans) counted += s.counted ? s.text : "";
  EXPECT_EQ(counted, "b");
}

TEST(ChatTemplate, RefusesWhatItCannotRenderNamingIt) {
  const auto refuses = [](const std::string& src, const std::string& needle) {
    try {
      kiri::data::ChatTemplate t(src, "tmpl");
      ADD_FAILURE() << "accepted " << src;
    } catch (const kiri::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tmpl"), std::string::npos) << e.what();
    }
  };
  refuses("{% macro f() %}{% endmacro %}", "'macro'");
  refuses("{{ raise_exception('no') }}", "raise_exception");
  refuses("{{ messages | length }}", "'length'");
  refuses("{{ 1 < 2 }}", "'<");
  refuses("{% for m in messages %}", "endfor");
}

}  // namespace
