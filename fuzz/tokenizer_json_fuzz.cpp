// libFuzzer target: a Hugging Face tokenizer.json, kiri::data::load_tokenizer_json over the
// file's text, then what a run does with an accepted tokenizer: encode a fixed text (with an
// added token written in it) and a text taken from the input, and decode what came out. Every
// id encode gives must lie below the vocab size.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kiri/data/hf_tokenizer.h"

namespace {

void check_ids(const kiri::data::BpeCore& core, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= core.vocab_size()) __builtin_trap();
  (void)core.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(kiri::fuzz::as_text(data, size));
  kiri::fuzz::refuse_by_name([&] {
    std::vector<kiri::data::HfAddedToken> added;
    const auto core = kiri::data::load_tokenizer_json("fuzz/tokenizer.json", text, added);
    for (const kiri::data::HfAddedToken& t : added)
      if (t.id < 0 || t.id >= core->vocab_size()) __builtin_trap();
    check_ids(*core, core->encode("Call me Ishmael.<|endoftext|> \xc3\xa9\xf0\x9f\x90\x8b 42!\n"));
    check_ids(*core, core->encode(text.substr(0, 256)));
  });
  return 0;
}
