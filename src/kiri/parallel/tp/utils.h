#pragma once
// Tensor-parallel sizes (Megatron-LM's core/tensor_parallel/utils.py): every
// split of a dimension over the tp ranks goes through divide(), so a layout
// that does not fit fails once, early, naming the numbers.
#include <cstdint>
#include <string>

namespace kiri::parallel::tp {

// numerator / denominator when it divides evenly; otherwise raises kConfig
// "<what>: <numerator> is not divisible by <denominator>" (also for a
// denominator <= 0 or a negative numerator).
int64_t divide(int64_t numerator, int64_t denominator, const std::string& what);

// Rows [start, end) of a vocabulary of `padded_vocab` rows that tp rank
// `rank` of `size` holds: start = rank * padded_vocab / size (Megatron's
// VocabUtility.vocab_range_from_global_vocab_size). The padded vocabulary
// must divide by size; rows past the real vocabulary are padding.
struct VocabRange {
  int64_t start = 0, end = 0;
  int64_t size() const { return end - start; }
};
VocabRange vocab_range(int64_t padded_vocab, int rank, int size);

// The smallest multiple of `multiple` (> 0) that is >= vocab: the padded
// vocabulary (e.g. 50257 -> 50304 for 128; 50 -> 52 for 4).
int64_t pad_vocab(int64_t vocab, int64_t multiple);

}  // namespace kiri::parallel::tp
