#include "kiri/data/tokenizer.h"

#include <filesystem>

#include "kiri/base/error.h"
#include "kiri/data/gpt2_tokenizer.h"
#include "kiri/data/hf_tokenizer.h"

namespace kiri::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] > kEot)
      KIRI_RAISE(kInvalidArgument, "byte tokenizer: id ", ids[i], " at position ", i,
                 " is outside [0, ", kEot + 1, ")");
    if (ids[i] == kEot)
      text += "<|endoftext|>";
    else
      text += static_cast<char>(ids[i]);
  }
  return text;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& data_dir) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2")
    return std::make_unique<Gpt2Tokenizer>(data_dir + "/gpt2/encoder.json",
                                           data_dir + "/gpt2/vocab.bpe");
  // Anything else that names a file or folder (or looks like a path) is a
  // Hugging Face tokenizer; the names above win over files called so.
  std::error_code ec;
  if (std::filesystem::exists(name, ec) || name.find('/') != std::string::npos ||
      name.ends_with(".json"))
    return std::make_unique<HfTokenizer>(name);
  KIRI_RAISE(kConfig, "unknown tokenizer '", name,
             "' (known: byte, gpt2, or the path of a Hugging Face tokenizer: a folder with "
             "tokenizer.json or vocab.json + merges.txt, or a tokenizer.json file)");
}

}  // namespace kiri::data
