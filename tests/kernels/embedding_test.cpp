#include <gtest/gtest.h>

#include "kernels/test_util.h"
#include "kiri/base/error.h"
#include "kiri/kernels/ops.h"

namespace kiri {
namespace {

using test::randn;

// B=2, T=3 with repeated tokens (1 twice in a row, 3 three times), maxT=4 > T.
Tensor make_tokens() {
  Tensor tok = test::empty({2, 3}, DType::kI32);
  const int32_t ids[] = {1, 3, 1, 3, 3, 0};
  std::copy(ids, ids + 6, tok.data<int32_t>());
  return tok;
}

TEST(Embedding, ForwardIsTokenPlusPosition) {
  Tensor tok = make_tokens(), wte = randn({5, 4}, 1), wpe = randn({4, 4}, 2);
  Tensor out = test::empty({2, 3, 4});
  kernels::embedding_forward<double>(out, tok, wte, wpe);
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(out.item(i * 4 + c),
                wte.item(tok.data<int32_t>()[i] * 4 + c) + wpe.item((i % 3) * 4 + c));
}

TEST(Embedding, GradientsMatchFiniteDifferencesWithRepeatedTokens) {
  Tensor tok = make_tokens(), wte = randn({5, 4}, 1), wpe = randn({4, 4}, 2);
  Tensor out = test::empty({2, 3, 4}), R = randn({2, 3, 4}, 3);
  auto loss = [&] {
    kernels::embedding_forward<double>(out, tok, wte, wpe);
    return test::dot(out, R);
  };
  Tensor dwte = randn(wte.shape(), 4), dwpe = randn(wpe.shape(), 5);
  Tensor dwte0 = test::clone(dwte), dwpe0 = test::clone(dwpe);
  kernels::embedding_backward<double>(dwte, dwpe, R, tok);
  test::expect_grad_matches_fd(wte, test::minus(dwte, dwte0), loss, "dwte");
  test::expect_grad_matches_fd(wpe, test::minus(dwpe, dwpe0), loss, "dwpe");
  // Token 2 and 4 never occur, position 3 is past T: no gradient there.
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(dwte.item(2 * 4 + c), dwte0.item(2 * 4 + c));
    EXPECT_EQ(dwpe.item(3 * 4 + c), dwpe0.item(3 * 4 + c));
  }
}

TEST(Embedding, RejectsTokenOutsideVocabulary) {
  Tensor tok = make_tokens(), wte = randn({3, 4}, 1), wpe = randn({4, 4}, 2);
  Tensor out = test::empty({2, 3, 4});
  try {
    kernels::embedding_forward<double>(out, tok, wte, wpe);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 3"), std::string::npos) << e.what();
  }
  Tensor short_wpe = randn({2, 4}, 2);
  EXPECT_THROW(kernels::embedding_forward<double>(out, tok, randn({5, 4}, 1), short_wpe), Error);
}

}  // namespace
}  // namespace kiri
