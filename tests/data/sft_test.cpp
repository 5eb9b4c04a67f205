// Fine-tuning data: TRL's chat and prompt-completion JSON Lines, rendered by kiri's simple
// template, encoded with a loss mask, written beside the shards and read back into samples
// whose uncounted targets are -1.
#include "kiri/data/sft.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/test_util.h"
#include "kiri/data/corpus.h"
#include "kiri/data/dataset.h"
#include "kiri/data/sample_stream.h"
#include "kiri/data/shard.h"

namespace kiri::data {
namespace {

using testing::expect_error;

// The byte tokenizer's ids are the bytes, so the expected tokens and mask can be spelled out.
std::vector<uint8_t> mask_of(const std::string& text, uint8_t v) {
  return std::vector<uint8_t>(text.size(), v);
}

TEST(Sft, SimpleChatMasksTheAssistantContentAndItsEnd) {
  ByteTokenizer byte;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  append_spans(render_simple_chat({{"user", "hi"}, {"assistant", "yo"}}), byte, tokens, mask);
  const std::string text = "<|user|>\nhi\n<|assistant|>\nyo\n";
  std::vector<int32_t> want(text.begin(), text.end());
  want.push_back(ByteTokenizer::kEot);
  EXPECT_EQ(tokens, want);
  std::vector<uint8_t> want_mask = mask_of("<|user|>\nhi\n<|assistant|>\n", 0);
  for (int i = 0; i < 4; ++i) want_mask.push_back(1);  // "yo\n" and the end-of-text token
  EXPECT_EQ(mask, want_mask);
}

TEST(Sft, PromptCompletionCountsTheCompletionAndTheEnd) {
  ByteTokenizer byte;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  append_spans(render_prompt_completion("2+2=", "4"), byte, tokens, mask);
  EXPECT_EQ(tokens, (std::vector<int32_t>{'2', '+', '2', '=', '4', ByteTokenizer::kEot}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1}));
}

TEST(Sft, ShardsCarryTheMaskAndSamplesSkipUncountedTargets) {
  testing::TempDir dir;
  const std::string in = dir.file("pc.jsonl");
  testing::write_text(in,
                      "{\"prompt\": \"abc\", \"completion\": \"de\"}\n\n"
                      "{\"prompt\": \"fg\", \"completion\": \"hij\"}\n");
  ByteTokenizer byte;
  DocumentOptions opts;
  opts.format = InputFormat::kPromptCompletion;
  // 12 tokens: a b c d e EOT f g h i j EOT; val = round(12 * 0.25) = 3: i j EOT.
  const PreparedCorpus c = build_corpus({in}, byte, dir.file("out"), 0.25, opts);
  EXPECT_EQ(c.documents, 2u);
  EXPECT_EQ(c.train_tokens, 9u);
  const Dataset ds = open_dataset(dir.file("out"));
  ASSERT_EQ(ds.train_mask.size(), 9u);
  ASSERT_EQ(ds.val_mask.size(), 3u);
  std::vector<int32_t> m(9);
  ds.train_mask.read(0, 9, m.data());
  EXPECT_EQ(m, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 0, 0, 1}));
  SampleStream s(ds.train, 4, 1);  // 2 samples: [0, 5) and [4, 9)
  s.set_loss_mask(ds.train_mask);
  std::vector<int32_t> x(4), y(4);
  s.fill_sequential(0, x.data(), y.data());
  EXPECT_EQ(x, (std::vector<int32_t>{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(y, (std::vector<int32_t>{-1, -1, 'd', 'e'}));
  s.fill_sequential(1, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<int32_t>{ByteTokenizer::kEot, -1, -1, 'h'}));
  int64_t counted = 0;
  for (uint64_t p = 0; p < 2; ++p) counted += s.counted_targets(p);
  EXPECT_EQ(counted, 4);
}

TEST(Sft, BadLinesAreNamed) {
  testing::TempDir dir;
  ByteTokenizer byte;
  DocumentOptions opts;
  opts.format = InputFormat::kChat;
  const std::string in = dir.file("c.jsonl");
  testing::write_text(in,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
                      "{\"messages\": [{\"role\": \"user\"}]}\n");
  expect_error([&] { build_corpus({in}, byte, dir.file("out"), 0.5, opts); }, ErrorKind::kData,
               {"c.jsonl:2", "messages[0]", "\"content\""});
  testing::write_text(in, "{\"text\": \"a\"}\n");
  expect_error([&] { build_corpus({in}, byte, dir.file("out"), 0.5, opts); }, ErrorKind::kData,
               {"c.jsonl:1", "\"messages\""});
  opts.format = InputFormat::kPromptCompletion;
  testing::write_text(in, "{\"prompt\": \"a\", \"completion\": 3}\n");
  expect_error([&] { build_corpus({in}, byte, dir.file("out"), 0.5, opts); }, ErrorKind::kData,
               {"c.jsonl:1", "\"completion\"", "3"});
}

TEST(Sft, AMaskThatDisagreesWithItsShardIsRefused) {
  testing::TempDir dir;
  const std::string in = dir.file("pc.jsonl");
  testing::write_text(in, "{\"prompt\": \"abc\", \"completion\": \"de\"}\n");
  ByteTokenizer byte;
  DocumentOptions opts;
  opts.format = InputFormat::kPromptCompletion;
  build_corpus({in}, byte, dir.file("out"), 0.5, opts);
  // A mask of another corpus (one value more) in place of train's.
  write_shard(dir.file("out/train.mask.bin"), kLossMaskName, kLossMaskVocab,
              std::vector<int32_t>{0, 0, 0, 1});
  expect_error([&] { open_dataset(dir.file("out")); }, ErrorKind::kData,
               {"train.mask.bin", "4 values", "want loss-mask"});
}

}  // namespace
}  // namespace kiri::data
