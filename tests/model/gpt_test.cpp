#include "kiri/model/gpt.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kiri/base/rng.h"
#include "kiri/nn/parameter_store.h"

namespace kiri::model {
namespace {

GPTConfig tiny_config() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.vocab_size = 11;
  c.block_size = 6;
  return c;
}

void random_tokens(Tensor& t, int vocab, uint64_t seed) {
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] = static_cast<int32_t>(rng.below(vocab));
}

TEST(GPT, HuggingFaceNamesAndShapes) {
  GPTConfig c = tiny_config();
  GPT<float> m(c);
  auto params = m.parameters();
  ASSERT_EQ(params.size(), 2u + 12u * c.n_layer + 2u);
  EXPECT_EQ(params[0]->name, "transformer.wte.weight");
  EXPECT_EQ(params[0]->shape, Shape({11, 8}));
  EXPECT_EQ(params[1]->name, "transformer.wpe.weight");
  EXPECT_EQ(params[2]->name, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(params[4]->name, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(params[4]->shape, Shape({8, 24}));  // Conv1D: [in, out]
  EXPECT_EQ(params[7]->name, "transformer.h.0.attn.c_proj.bias");
  EXPECT_EQ(params[10]->name, "transformer.h.0.mlp.c_fc.weight");
  EXPECT_EQ(params[10]->shape, Shape({8, 32}));
  EXPECT_EQ(params[12]->name, "transformer.h.0.mlp.c_proj.weight");
  EXPECT_EQ(params[12]->shape, Shape({32, 8}));
  EXPECT_EQ(params.back()->name, "transformer.ln_f.bias");
  int64_t total = 0;
  for (auto* p : params) total += p->numel();
  EXPECT_EQ(total, c.num_parameters());
}

TEST(GPT, RefusesImpossibleShapes) {
  GPTConfig c = tiny_config();
  c.n_head = 3;
  try {
    GPT<float> m(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head = 3 must divide model.n_embd = 8"),
              std::string::npos)
        << e.what();
  }
}

// A 2-layer Llama: 4 query heads of 4, kv_heads key/value heads, a SwiGLU of 24.
GPTConfig tiny_llama(int kv_heads, bool tied, bool llama3) {
  GPTConfig c = tiny_config();
  c.arch = Arch::kLlama;
  c.n_head = 4;
  c.n_embd = 16;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = 24;
  c.tie_word_embeddings = tied;
  c.rope_theta = 500;
  if (llama3) {  // a short original context, so that the 2 frequencies fall in 2 bands
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.original_max_position_embeddings = 16;
    c.rope_scaling.factor = 4;
  }
  return c;
}

struct ArchCase {
  const char* name;
  GPTConfig config;
};

class EveryArch : public ::testing::TestWithParam<ArchCase> {};

const auto kArchs = ::testing::Values(ArchCase{"gpt2", tiny_config()},
                                      ArchCase{"llama_gqa_untied", tiny_llama(2, false, false)},
                                      ArchCase{"llama_mha_tied", tiny_llama(4, true, false)},
                                      ArchCase{"llama_mqa_llama3", tiny_llama(1, false, true)});

// The whole model's gradient against central finite differences, in double.
TEST_P(EveryArch, GradientMatchesFiniteDifferencesInDouble) {
  const GPTConfig c = GetParam().config;
  Allocator alloc;
  GPT<double> m(c);
  nn::ParameterStore store(m.parameters(), DType::kF64, alloc);
  store.initialize(7);
  // Larger weights than GPT-2's 0.02 so that every path carries signal.
  for (int64_t i = 0; i < store.numel(); ++i)
    store.values().data<double>()[i] += 0.3 * random_normal(99, 1, static_cast<uint64_t>(i));
  Tensor x = Tensor::empty({2, 5}, DType::kI32, Category::kOther, alloc);
  Tensor y = Tensor::empty({2, 5}, DType::kI32, Category::kOther, alloc);
  random_tokens(x, c.vocab_size, 1);
  random_tokens(y, c.vocab_size, 2);
  y.data<int32_t>()[3] = -1;  // an ignored target
  nn::Context ctx{alloc};
  const double w = 1.0 / 9.0;
  store.zero_grad();
  m.forward(ctx, x, y, w);
  m.backward(ctx);
  nn::Context eval{alloc, false};
  auto loss = [&] { return m.forward(eval, x, y, w) * w; };
  double* v = store.values().data<double>();
  const double* g = store.grads().data<double>();
  int checked = 0;
  for (nn::Parameter* p : store.parameters()) {
    const int64_t step = std::max<int64_t>(1, p->numel() / 7);
    for (int64_t i = 0; i < p->numel(); i += step) {
      const int64_t k = p->offset + i;
      const double h = 1e-5, orig = v[k];
      v[k] = orig + h;
      const double lp = loss();
      v[k] = orig - h;
      const double lm = loss();
      v[k] = orig;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[k], fd, 1e-7 + 1e-5 * std::fabs(fd)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

TEST_P(EveryArch, ActivationsAreReleasedAfterBackward) {
  const GPTConfig c = GetParam().config;
  Allocator alloc;
  GPT<float> m(c);
  nn::ParameterStore store(m.parameters(), DType::kF32, alloc);
  store.initialize(1);
  Tensor x = Tensor::zeros({2, 6}, DType::kI32, Category::kOther, alloc);
  nn::Context ctx{alloc};
  m.forward(ctx, x, x, 1.0 / 12);
  EXPECT_GT(alloc.stats().of(Category::kActivations), 0);
  m.backward(ctx);
  EXPECT_EQ(alloc.stats().of(Category::kActivations), 0);
  EXPECT_EQ(alloc.stats().of(Category::kParameters), c.num_parameters() * 4);
  EXPECT_EQ(alloc.stats().of(Category::kGradients), c.num_parameters() * 4);
}

INSTANTIATE_TEST_SUITE_P(GPT, EveryArch, kArchs,
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiri::model
