// The masked loss of fine-tuning data (docs/data.md, "Fine-tuning data"): the first step's
// loss is the mean over the global batch's counted targets (the completions and their
// end-of-text tokens), checked against each target's loss taken alone and summed by hand.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "kiri/data/corpus.h"
#include "kiri/data/tokenizer.h"
#include "kiri/train/trainer.h"
#include "temp_dir.h"
#include "train_test_util.h"

namespace kiri::train {
namespace {

// Prompt-completion documents (TRL's format), byte-level: 15 + 8 and 16 + 5 bytes, each
// document followed by the end-of-text token.
const char* const kDocs[4][2] = {{"The cat sat on ", "the mat."},
                                 {"Two plus two is ", "four."},
                                 {"Red, green and ", "blue are colours."},
                                 {"One, two, ", "three, four, five."}};

// The training split as the documents pack it, and which of its tokens count (1: a
// completion's byte or the end-of-text token after it).
struct Packed {
  std::vector<int32_t> tokens;
  std::vector<int> counted;
};
Packed pack(size_t n_tokens) {
  Packed p;
  for (const auto& d : kDocs) {
    for (int part = 0; part < 2; ++part)
      for (const char ch : std::string(d[part])) {
        p.tokens.push_back(static_cast<unsigned char>(ch));
        p.counted.push_back(part);
      }
    p.tokens.push_back(data::ByteTokenizer::kEot);
    p.counted.push_back(1);
  }
  p.tokens.resize(n_tokens);
  p.counted.resize(n_tokens);
  return p;
}

TEST(SftLoss, TheFirstStepsLossIsTheMeanOverItsCountedTargets) {
  omp_set_num_threads(1);
  const std::string dir = kiri::testing::temp_dir("sft_loss");
  {
    std::ofstream out(dir + "/pc.jsonl");
    for (const auto& d : kDocs)
      out << "{\"prompt\": \"" << d[0] << "\", \"completion\": \"" << d[1] << "\"}\n";
  }
  data::ByteTokenizer byte;
  data::DocumentOptions opts;
  opts.format = data::InputFormat::kPromptCompletion;
  const data::PreparedCorpus corpus =
      data::build_corpus({dir + "/pc.jsonl"}, byte, dir + "/shards", 0.5, opts);
  // 108 tokens, half each: documents 1 and 2 (24 + 22) and 8 prompt bytes of document 3.
  ASSERT_EQ(corpus.train_tokens, 54u);
  RunConfig c = byte_test_config(2, 2, 16, 2);
  c.data.dir = dir + "/shards";
  c.data.corpus.clear();
  c.train.seq_len = 24;  // (54 - 1) / 24: 2 samples, both in the first global batch of 2
  Trainer ref(c), t(c);  // the same seed: the same initial weights

  const Packed p = pack(54);
  Allocator& a = ref.allocator();
  Tensor x = Tensor::empty({2, 24}, DType::kI32, Category::kBuffers, a);
  Tensor y = Tensor::empty({2, 24}, DType::kI32, Category::kBuffers, a);
  for (int i = 0; i < 48; ++i) x.data<int32_t>()[i] = p.tokens[static_cast<size_t>(i)];
  // Each target's loss alone (every other target -1, which the loss skips); the counted ones
  // (target i predicts token i + 1) summed by hand.
  nn::Context ctx(ref.allocator(), /*training=*/false);
  double counted_sum = 0, all_sum = 0;
  int counted = 0;
  for (int i = 0; i < 48; ++i) {
    for (int k = 0; k < 48; ++k) y.data<int32_t>()[k] = -1;
    y.data<int32_t>()[i] = p.tokens[static_cast<size_t>(i) + 1];
    const double loss = ref.model().forward(ctx, x, y, 1.0);
    all_sum += loss;
    if (p.counted[static_cast<size_t>(i) + 1]) {
      counted_sum += loss;
      ++counted;
    }
  }
  ASSERT_EQ(counted, 15);  // "the mat." and "four.", each with its end-of-text token
  const StepMetrics m = t.train_step();
  EXPECT_NEAR(m.loss, counted_sum / counted, 1e-5 * counted_sum / counted);
  // Not the mean over all 48 targets, which a mask that was ignored would give.
  EXPECT_GT(std::fabs(m.loss - all_sum / 48), 1e-3) << m.loss << " " << all_sum / 48;
}

}  // namespace
}  // namespace kiri::train
