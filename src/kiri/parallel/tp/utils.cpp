#include "kiri/parallel/tp/utils.h"

#include "kiri/base/error.h"

namespace kiri::parallel::tp {

int64_t divide(int64_t numerator, int64_t denominator, const std::string& what) {
  KIRI_CHECK_KIND(kConfig, denominator > 0 && numerator >= 0 && numerator % denominator == 0, what,
                  ": ", numerator, " is not divisible by ", denominator);
  return numerator / denominator;
}

VocabRange vocab_range(int64_t padded_vocab, int rank, int size) {
  const int64_t per_rank = divide(padded_vocab, size, "padded vocabulary over tp ranks");
  KIRI_CHECK(rank >= 0 && rank < size, "tp rank ", rank, " outside [0, ", size, ")");
  return {rank * per_rank, (rank + 1) * per_rank};
}

int64_t pad_vocab(int64_t vocab, int64_t multiple) {
  KIRI_CHECK(vocab >= 0 && multiple > 0, "pad_vocab: vocabulary ", vocab, ", multiple ", multiple);
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace kiri::parallel::tp
