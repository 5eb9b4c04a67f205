// libFuzzer target: the readers of `kiri data` and data.dir over arbitrary bytes. The first
// byte picks the reader: token file detection (TokenSource::from_bytes, then verify and a
// read of every token), JSON Lines, or text split on a separator (append_text_documents
// with the byte tokenizer).
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_util.h"
#include "kiri/data/documents.h"
#include "kiri/data/token_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const unsigned char> rest(data + 1, size - 1);
  kiri::fuzz::refuse_by_name([&] {
    if (data[0] % 3 == 0) {
      const kiri::data::TokenSource src = kiri::data::TokenSource::from_bytes(rest, "fuzz.bin");
      // What the reader accepted must lie inside the bytes it was given.
      const kiri::data::TokenSegment& s = src.segments().front();
      if (s.data < rest.data() || s.data + s.count * s.width > rest.data() + rest.size())
        __builtin_trap();
      std::vector<int32_t> all(src.size());
      src.read(0, src.size(), all.data());
      for (int32_t t : all)
        if (t < 0) __builtin_trap();
      src.verify(257);
      return;
    }
    const kiri::data::ByteTokenizer byte;
    kiri::data::DocumentOptions opts;
    opts.separator = data[0] % 3 == 2 ? "\n\n" : "";
    std::vector<int32_t> tokens;
    uint64_t documents = 0;
    kiri::data::SourceInfo info;
    kiri::data::append_text_documents(kiri::fuzz::as_text(rest.data(), rest.size()), "fuzz.txt",
                                      data[0] % 3 == 1, byte, opts, tokens, documents, info);
    // Documents are joined by exactly one end-of-text token each.
    uint64_t eots = 0;
    for (int32_t t : tokens) {
      if (t < 0 || t > 256) __builtin_trap();
      eots += t == 256;
    }
    if (documents != info.documents || (documents > 0 && eots != documents - 1)) __builtin_trap();
  });
  return 0;
}
