// libFuzzer target: kiri::data::parse_shard (the reader behind read_shard and
// read_shard_header) over arbitrary bytes.
#include <cstdint>
#include <span>

#include "fuzz_util.h"
#include "kiri/data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiri::fuzz::refuse_by_name([&] {
    const kiri::data::TokenShard shard = kiri::data::parse_shard({data, size}, "fuzz.bin");
    // What the reader accepted must be what its header promised.
    if (shard.tokens.size() != shard.header.token_count) __builtin_trap();
    for (int32_t t : shard.tokens)
      if (t < 0 || static_cast<uint32_t>(t) >= shard.header.vocab_size) __builtin_trap();
  });
  return 0;
}
