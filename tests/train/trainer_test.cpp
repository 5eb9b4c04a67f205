#include "kiri/train/trainer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiri/data/sample_stream.h"
#include "kiri/data/shard.h"
#include "kiri/data/stats.h"
#include "kiri/kernels/ops.h"
#include "temp_dir.h"
#include "test_paths.h"

namespace kiri::train {
namespace {

namespace fs = std::filesystem;

using kiri::testing::temp_dir;

// A small byte-level model on the Moby-Dick corpus.
RunConfig small_config(const std::string& dir) {
  RunConfig c = default_run_config();
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.block_size = 64;
  c.data.tokenizer = "byte";
  c.data.assets = KIRI_TEST_DATA_DIR;
  c.train.micro_batch = 8;
  c.train.seq_len = 64;
  c.train.steps = 10;
  c.train.warmup = 2;
  c.train.optimizer.lr = 3e-3;
  c.train.min_lr = 3e-4;
  c.checkpoint.dir = dir + "/ckpt";
  c.log.metrics = dir + "/metrics.jsonl";
  return c;
}

TEST(Trainer, MemoryOfStatesEqualsTheAnalyticCountAfterTheFirstStep) {
  const std::string dir = temp_dir("mem");
  Trainer t(small_config(dir));
  t.train_step();
  const MemoryStats s = t.allocator().stats();
  const int64_t n = t.config().model.num_parameters();
  EXPECT_EQ(n, t.store().numel());
  EXPECT_EQ(s.of(Category::kParameters), 4 * n);
  EXPECT_EQ(s.of(Category::kGradients), 4 * n);
  EXPECT_EQ(s.of(Category::kOptimizerStates), 8 * n);
  EXPECT_EQ(s.of(Category::kActivations), 0);  // released after backward
  EXPECT_GT(s.peak_of(Category::kActivations), 0);
}

TEST(Trainer, MemoryLimitRaisesTheDocumentedError) {
  const std::string dir = temp_dir("limit");
  RunConfig c = small_config(dir);
  c.train.mem_limit = "1MiB";  // the parameters alone are ~0.5 MiB, Adam's states twice that
  try {
    Trainer t(c);
    t.train_step();
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfMemory);
    const std::string m = e.what();
    EXPECT_NE(m.find("would exceed the limit of 1.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("the largest category is"), std::string::npos) << m;
    EXPECT_NE(m.find("optimizer_states"), std::string::npos) << m;
  }
}

TEST(Trainer, TinyModelOverfitsOneBatch) {
  Allocator alloc;
  kiri::GPTConfig c{2, 2, 32, 256, 32};
  model::GPT<float> m(c);
  nn::ParameterStore store(m.parameters(), DType::kF32, alloc);
  store.initialize(3);
  kiri::AdamWConfig oc;
  oc.weight_decay = 0;
  optim::AdamW opt(store, oc, alloc);
  Tensor x = Tensor::empty({4, 32}, DType::kI32, Category::kOther, alloc);
  Tensor y = Tensor::empty({4, 32}, DType::kI32, Category::kOther, alloc);
  const std::string text =
      "Call me Ishmael. Some years ago--never mind how long precisely--having "
      "little or no money in my purse, and nothing particular to interest me "
      "on shore, I thought I would sail about a little and see the watery part.";
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.data<int32_t>()[i] = static_cast<unsigned char>(text[i % text.size()]);
    y.data<int32_t>()[i] = static_cast<unsigned char>(text[(i + 1) % text.size()]);
  }
  nn::Context ctx{alloc};
  double loss = 0;
  for (int s = 0; s < 300 && (s < 10 || loss >= 0.05); ++s) {
    store.zero_grad();
    loss = m.forward(ctx, x, y, 1.0 / 128) / 128;
    m.backward(ctx);
    opt.clip_and_step(3e-3);
  }
  EXPECT_LT(loss, 0.1);
}

TEST(Trainer, ValidationLossGoesClearlyBelowTheUnigramEntropy) {
  const std::string dir = temp_dir("entropy");
  RunConfig c = small_config(dir);
  c.train.steps = 300;
  c.train.micro_batch = 16;
  c.train.warmup = 20;
  c.train.eval_every = 0;
  c.train.eval_batches = 16;
  c.log.every = 100;
  c.checkpoint.dir.clear();
  Trainer t(c);
  t.run();
  data::TokenShard val =
      data::read_shard(std::string(KIRI_TEST_DATA_DIR) + "/tokens/moby-dick.byte/val.bin");
  const double h = data::unigram_entropy_nats(val.tokens, 257);
  const double loss = t.evaluate(16);
  EXPECT_GT(h, 2.8);  // English bytes: ~3.0 nats
  EXPECT_LT(loss, h - 0.4) << "val loss " << loss << " vs unigram entropy " << h;
  EXPECT_TRUE(fs::exists(dir + "/metrics.png"));
}

TEST(Trainer, ResumingGivesExactlyTheSameLosses) {
  const std::string dir = temp_dir("resume");
  RunConfig c = small_config(dir);
  c.train.steps = 6;
  c.checkpoint.every = 3;
  c.checkpoint.keep_last = 0;
  std::vector<double> straight;
  {
    Trainer t(c, "{}");
    for (int i = 0; i < 6; ++i) {
      straight.push_back(t.train_step().loss);
      if (t.step() == 3) t.save_checkpoint();
    }
  }
  Trainer r(c, "{}");
  r.load_checkpoint(dir + "/ckpt/step_00000003");
  EXPECT_EQ(r.step(), 3);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(r.train_step().loss, straight[i]) << "step " << i + 1;
}

TEST(Trainer, TruncatedOrCorruptedCheckpointIsRefused) {
  const std::string dir = temp_dir("corrupt");
  RunConfig c = small_config(dir);
  Trainer t(c, "{}");
  t.train_step();
  const std::string ck = t.save_checkpoint();
  const std::string model = ck + "/model.safetensors";
  const auto size = fs::file_size(model);
  fs::resize_file(model, size - 100);
  Trainer u(c, "{}");
  try {
    u.load_checkpoint(ck);
    FAIL() << "a truncated checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kCheckpoint) << e.what();
  }
  {
    std::fstream f(ck + "/state.json", std::ios::in | std::ios::out);
    f << "{ not json";
  }
  EXPECT_THROW(u.load_checkpoint(ck), Error);
}

TEST(Trainer, LoadingIntoAnotherShapeNamesTheTensor) {
  const std::string dir = temp_dir("shape");
  RunConfig c = small_config(dir);
  Trainer t(c, "{}");
  const std::string ck = t.save_checkpoint();
  c.model.n_embd = 32;
  Trainer u(c, "{}");
  try {
    u.load_checkpoint(ck);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer.wte.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiri::train
