#pragma once
// Corpus statistics that training tests compare losses against.
#include <cstdint>
#include <span>

namespace kiri::data {

// Entropy in nats of the tokens' unigram distribution: the loss of a model
// that predicts token frequencies and ignores context. Raises
// kInvalidArgument on an empty span or a token outside [0, vocab).
double unigram_entropy_nats(std::span<const int32_t> tokens, int vocab);

}  // namespace kiri::data
