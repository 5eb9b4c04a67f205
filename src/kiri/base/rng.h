#pragma once
// Counter-based random numbers: the value at (seed, stream, index) does not
// depend on what was drawn before, so a shard of a tensor can draw exactly its
// slice of the full tensor's initialisation (tensor parallel, ZeRO-3).
#include <cmath>
#include <cstdint>
#include <string_view>

#include "kiri/base/hash.h"

namespace kiri {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  return splitmix64(a ^ splitmix64(b));
}

// FNV-1a, to turn a parameter name into a stream id.
inline uint64_t hash_string(std::string_view s) {
  return fnv1a64(s);
}

inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return hash_combine(hash_combine(seed, stream), index);
}

// Uniform in (0, 1): 53 random bits, never exactly 0.
inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (static_cast<double>(random_bits(seed, stream, index) >> 11) + 0.5) *
         (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller over two counter draws.
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = random_uniform(seed, stream, 2 * index);
  double u2 = random_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// A sequential generator whose whole state is (seed, counter): it is saved in
// checkpoints so that a resumed run draws the same numbers.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t counter = 0) : seed_(seed), counter_(counter) {}
  uint64_t next_u64() { return random_bits(seed_, 0, counter_++); }
  double uniform() { return random_uniform(seed_, 0, counter_++); }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next_u64() % n; }
  uint64_t seed() const { return seed_; }
  uint64_t counter() const { return counter_; }

 private:
  uint64_t seed_;
  uint64_t counter_;
};

}  // namespace kiri
