// kiri::resolve: the one place where a config's sentinels take their values. Each fact
// resolves its own sentinel and nothing else; a fact not known yet (0) leaves it; a resolved
// config resolves to itself.
#include <gtest/gtest.h>

#include <string>

#include "kiri/base/error.h"
#include "kiri/config/run_config.h"

namespace kiri {
namespace {

RunConfig sentinels() {
  RunConfig c = default_run_config();  // model.vocab_size 0, parallel.dp 0
  c.parallel.tp = 2;
  c.train.micro_batch = 4;
  c.train.optimizer.lr = 6e-4;
  c.train.min_lr = 6e-5;
  c.train.lr_scaling = LrScaling::kLinear;
  c.train.base_batch = 8;
  return c;
}

TEST(Resolve, EachFactResolvesItsSentinelAndNothingElse) {
  RunConfig c = sentinels();
  EXPECT_FALSE(resolve(c, {}).layout.has_value());  // nothing known: nothing changes
  EXPECT_EQ(c.model.vocab_size, 0);
  EXPECT_EQ(c.parallel.dp, 0);

  resolve(c, {.tokenizer_vocab = 257});
  EXPECT_EQ(c.model.vocab_size, 257);
  EXPECT_EQ(c.parallel.dp, 0);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 6e-4);

  // The world resolves dp; the rates stay the given ones unless asked (a printed or stored
  // config keeps them).
  const Resolution r = resolve(c, {.world = 8});
  EXPECT_EQ(r.layout.value_or(""), "layout: dp 4 inferred = world 8 / (tp 2 x pp 1)");
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_TRUE(r.learning_rate.empty());
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 6e-4);

  // The trainer's: the global batch 4 x 1 x 1 x 4 = 16 against the base 8 doubles the rates.
  const Resolution t = resolve(c, {.world = 8, .learning_rate = true});
  EXPECT_FALSE(t.layout.has_value());
  EXPECT_NE(t.learning_rate.find("lr 0.0006 x (16/8) = 0.0012"), std::string::npos)
      << t.learning_rate;
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 1.2e-3);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 1.2e-4);

  // Idempotent: resolving the resolved config again changes nothing (the rates' line says
  // x (16/16)).
  const RunConfig once = c;
  const Resolution again = resolve(c, {.tokenizer_vocab = 257, .world = 8, .learning_rate = true});
  EXPECT_FALSE(again.layout.has_value());
  EXPECT_NE(again.learning_rate.find("x (16/16)"), std::string::npos) << again.learning_rate;
  EXPECT_EQ(c.model.vocab_size, once.model.vocab_size);
  EXPECT_EQ(c.parallel.dp, once.parallel.dp);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, once.train.optimizer.lr);
}

TEST(Resolve, AVocabularyBelowTheTokenizersAndABadWorldAreNamed) {
  RunConfig c = sentinels();
  c.model.vocab_size = 100;
  try {
    resolve(c, {.tokenizer_vocab = 257, .tokenizer = "byte"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find(
                  "model.vocab_size = 100 is smaller than the byte tokenizer's vocabulary of 257"),
              std::string::npos)
        << e.what();
  }
  RunConfig w = sentinels();
  try {
    resolve(w, {.world = 3});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("world 3 is not a multiple of tp 2 x pp 1 = 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiri
